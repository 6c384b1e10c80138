"""servelab convert on a model that does not batch: the GraphSAGE layers (x, nbr1, nbr2 with leading dims of
their own). Configs say max_batch_size 0 with full shapes, parity runs whole requests whose sizes differ from
the traced example, and data that does not fit is refused naming the input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.models import sage_layers_source
from servelab.convert.pipeline import ConvertSpec, convert
from servelab.errors import InvalidArgument
from servelab.graph.parity import example_block
from servelab.repository import ModelRepository

F, C, H, K = 8, 3, 16, (3, 3)
FACTORY = sage_layers_source(F, C, H, K)


@pytest.fixture()
def source(tmp_path: Path) -> Path:
    path = tmp_path / "sage.py"
    path.write_text(FACTORY)
    return path


def _request(path: Path, batch: int) -> Path:
    x, nbr1, nbr2 = example_block(F, K, batch=batch, hop1=4 * batch, hop2=9 * batch, seed=5)
    np.savez(path, x=x, nbr1=nbr1, nbr2=nbr2)
    return path


def test_unbatched_model_converts_with_full_shapes_and_whole_request_parity(source: Path, tmp_path: Path) -> None:
    data = _request(tmp_path / "block.npz", batch=6)  # other sizes than the traced example (2 seeds)
    out = tmp_path / "repo"
    result = convert(ConvertSpec(source=str(source), out=out, name="sage", targets=("onnx", "openvino", "torchscript", "tensorrt"),
                                 precisions=("fp32", "int8"), data=data))  # fmt: skip
    status = {(a.target, a.precision): a.status for a in result.artefacts}
    for target in ("onnx", "openvino", "torchscript"):
        assert status[(target, "fp32")] == "accepted", result.artefacts
    assert status[("onnx", "int8")] == "accepted" and status[("tensorrt", "fp32")] == "skipped"
    fp32 = next(a for a in result.artefacts if (a.target, a.precision) == ("onnx", "fp32"))
    assert fp32.parity is not None and fp32.parity.samples == 6  # the request's 6 seeds, one row each
    assert [o.max_rel_error < 1e-4 for o in fp32.parity.outputs] == [True, True]
    repo = ModelRepository(out)
    for name in (a.model for a in result.accepted()):
        config = repo.read(name).config
        assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
        assert [(t.name, list(t.dims)) for t in config.input] == [("x", [-1, F]), ("nbr1", [-1, K[1]]), ("nbr2", [-1, K[0]])]
        assert [(t.name, list(t.dims)) for t in config.output] == [("logits", [-1, C]), ("embeddings", [-1, H])]
    manifest = json.loads((out / "sage.convert.json").read_text())
    assert manifest["max_batch_size"] == 0 and manifest["data"] == f"file {data}"
    with np.load(out / "sage.request.npz") as z:  # the request select measures on without --data
        assert sorted(z.files) == ["nbr1", "nbr2", "x"] and z["x"].shape == (6 + 24 + 54, F)


def test_without_data_the_source_example_is_the_request(source: Path, tmp_path: Path) -> None:
    result = convert(ConvertSpec(source=str(source), out=tmp_path / "repo", targets=("onnx",)))
    assert result.data_source == "generated: the source's example_inputs()"
    assert [a.status for a in result.artefacts] == ["accepted"]


def test_data_that_does_not_fit_a_whole_request_is_refused(source: Path, tmp_path: Path) -> None:
    x, nbr1, nbr2 = example_block(F, K, batch=2, seed=0)
    np.savez(tmp_path / "bad.npz", x=x[None], nbr1=nbr1, nbr2=nbr2)  # x with an extra (batch) axis
    with pytest.raises(InvalidArgument, match=r"input 'x' has shape \[1, 18, 8\], expected \[-1, 8\]"):
        convert(ConvertSpec(source=str(source), out=tmp_path / "repo", targets=("onnx",), data=tmp_path / "bad.npz"))
    np.savez(tmp_path / "partial.npz", x=x, nbr1=nbr1)
    with pytest.raises(InvalidArgument, match=r"lacks inputs \['nbr2'\]"):
        convert(ConvertSpec(source=str(source), out=tmp_path / "repo", targets=("onnx",), data=tmp_path / "partial.npz"))
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")
    with pytest.raises(InvalidArgument, match="does not batch takes .npz"):
        convert(ConvertSpec(source=str(source), out=tmp_path / "repo", targets=("onnx",), data=tmp_path / "table.csv"))
