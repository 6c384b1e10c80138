"""servelab select on a model that does not batch (GraphSAGE layers: x, nbr1, nbr2 with leading dims of their
own), with the real Triton as a reference row: no batching dimension in the grid, whole requests over both
front doors, and the config it writes reads back through the same typed schemas and serves.

Triton is unpacked under ``.peers/`` on first use; the test skips only where that download is impossible.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as thttp

from harness.models import sage_layers_source
from harness.servers import running_server
from servelab.advisor.grid import Batching
from servelab.advisor.matrix import Constraints, parse_weights
from servelab.advisor.select import SelectResult, SelectSpec, run_select
from servelab.advisor.wire import MeasureSettings
from servelab.backends import backend_parameters
from servelab.backends.parameters import SchedulerParameters
from servelab.bench._fetch import DownloadFailed
from servelab.graph.parity import example_block
from servelab.repository import parse_config_text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PEERS_DIR = Path(__file__).resolve().parents[2] / ".peers"
F, C, H, K = 8, 3, 16, (3, 3)
FACTORY = sage_layers_source(F, C, H, K)


def _triton_ready() -> None:
    from servelab.bench.peers._triton_install import TritonInstall

    try:
        TritonInstall(PEERS_DIR).ensure()
    except DownloadFailed as exc:
        pytest.skip(f"cannot download Triton: {str(exc)[:300]}")


@pytest.fixture(scope="module")
def selected(tmp_path_factory: pytest.TempPathFactory) -> tuple[SelectResult, Path]:
    _triton_ready()
    tmp = tmp_path_factory.mktemp("select-unbatched")
    (tmp / "sage.py").write_text(FACTORY)
    x, nbr1, nbr2 = example_block(F, K, batch=4, hop1=12, hop2=36, seed=3)
    np.savez(tmp / "block.npz", x=x, nbr1=nbr1, nbr2=nbr2)
    spec = SelectSpec(
        model=str(tmp / "sage.py"), repo=tmp / "repo", report_dir=tmp / "report", data=tmp / "block.npz",
        constraints=Constraints(sla_p99_ms=250.0), weights=parse_weights(None),
        measure=MeasureSettings(250.0, window_ms=150, max_windows=3, warmup_requests=5, closed_concurrency=4, rate_steps=1),
        targets=("onnx", "torchscript"), precisions=("fp32",), batchings=(Batching(), Batching(8, 200)),
        instances=(1, 2), threads=(1,), front_doors=("rest", "grpc"), peers=("triton",), peers_dir=PEERS_DIR,
        inprocess_s=0.1, exhaustive=True,  # every point, so that both doors are measured in full
    )  # fmt: skip
    return run_select(spec), tmp / "repo"


def test_no_batching_dimension_and_whole_requests_on_both_doors(selected: tuple[SelectResult, Path]) -> None:
    result, _ = selected
    assert result.grid.batchings == (Batching(),) and result.grid.size == 2 * 2 * 2  # artefacts x instances x doors
    assert "does not batch" in result.grid_note and result.log[0] == result.grid_note
    assert len(result.measured) == result.grid.size
    assert result.data_source.startswith("file ")
    doors = {c.front_door for c, m in result.measured.items() if m.max_rate > 0}
    assert doors == {"rest", "grpc"}, {c.label: m.search.to_dict() for c, m in result.measured.items()}
    assert all(r.batch == 1 and r.error is None for r in result.inprocess)


def test_triton_is_a_reference_row_labelled_by_how_it_served(selected: tuple[SelectResult, Path]) -> None:
    result, _ = selected
    row = next(r for r in result.decision.rows if r.kind == "reference")
    assert row.server == "triton" and "python backend" in row.label and "onnxruntime" in row.label, row.label
    assert row.search.error is None and row.max_rate > 0, row.search.to_dict()
    assert row.verdict.startswith("reference row")


def test_the_written_config_reads_back_through_the_schemas_and_serves(selected: tuple[SelectResult, Path], tmp_path: Path) -> None:
    result, repo = selected
    winner = result.decision.winner
    assert winner is not None and winner.candidate is not None
    config = parse_config_text((repo / "sage" / "config.pbtxt").read_text(), "selected")
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert config.instance_group[0].count == winner.candidate.instances
    params = backend_parameters(config.backend).read(config)
    assert params.threads_field is not None and getattr(params, params.threads_field) == winner.candidate.threads
    assert SchedulerParameters.read(config) == SchedulerParameters()  # select sets no scheduler key
    assert result.config_text == (repo / "sage" / "config.pbtxt").read_text()
    x, nbr1, nbr2 = example_block(F, K, batch=5, hop1=7, hop2=11, seed=9)
    with running_server(repo, tmp_path, "selected", "--model-control-mode", "explicit", "--load-model", "sage") as server:
        client = thttp.InferenceServerClient(server.http_url.removeprefix("http://"))
        inputs = []
        for name, arr, dtype in (("x", x, "FP32"), ("nbr1", nbr1, "INT64"), ("nbr2", nbr2, "INT64")):
            inputs.append(thttp.InferInput(name, list(arr.shape), dtype))
            inputs[-1].set_data_from_numpy(arr, binary_data=True)
        out = client.infer("sage", inputs)
        assert out.as_numpy("logits").shape == (5, C) and out.as_numpy("embeddings").shape == (5, H)
