"""Sequence models against Triton's own tools: perf_analyzer 2.40 drives servelab's sequence batcher
(``--sequence-length``, HTTP and gRPC, direct and oldest), and the real Triton 2.51 (python backend)
serves the same python sequence model and config.pbtxt files as servelab: same answers, same config JSON,
Triton's error texts. Installed under .peers/ as in test_triton_peer.py (skips only when a download is
impossible)."""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

from harness.peers import installed_perf_analyzer, triton_serving
from harness.repository import sequence_models
from harness.servers import ServerProcess, running_server
from servelab.bench.peers.base import Endpoint
from servelab.bench.specs import InputSpec, LoadSpec, TargetSpec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[3]
PYTHON_MODELS = ("sequence_accumulator", "add_sub", "reshaped")
RESHAPED_CONFIG = """\
name: "reshaped"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape: { shape: [ 4 ] } },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100 }
model_warmup [ { name: "zeros" batch_size: 2 inputs [
  { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 2, 2 ] zero_data: true } },
  { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } } ] } ]
"""


@pytest.fixture(scope="module")
def servelab(tmp_path_factory: pytest.TempPathFactory, log_dir: Path) -> Iterator[ServerProcess]:
    """servelab on the ONNX sequence examples (this Triton has no ONNX Runtime) and the python models."""
    root = tmp_path_factory.mktemp("sequence-peers")
    sequence_models(root)
    for name in ("sequence_accumulator", "add_sub"):
        shutil.copytree(ROOT / "examples" / "triton_models" / name, root / name)
    shutil.copytree(root / "add_sub", root / "reshaped")  # add_sub's model.py: the reshape reaches it as [4]
    (root / "reshaped" / "config.pbtxt").write_text(RESHAPED_CONFIG)
    with running_server(root, log_dir, "sequence-peers") as server:
        yield server


@pytest.fixture(scope="module")
def triton(servelab: ServerProcess) -> Iterator[Endpoint]:
    """Triton on the same folders of the python models."""
    with triton_serving(servelab.repository / model for model in PYTHON_MODELS) as endpoint:
        yield endpoint


def _stats(server: ServerProcess, model: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{server.http_url}/v2/models/{model}/stats", timeout=10) as r:
        return json.loads(r.read())["model_stats"][0]  # type: ignore[no-any-return]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", ["simple_sequence", "simple_dyna_sequence"])
def test_perf_analyzer_drives_sequences(servelab: ServerProcess, protocol: str, model: str) -> None:
    perf_analyzer = installed_perf_analyzer(percentile=None, extra_args=("--sequence-length", "5"))
    before = _stats(servelab, model)["inference_stats"]
    url = servelab.grpc_address if protocol == "grpc" else servelab.http_url
    target = TargetSpec(f"oip-{protocol}", url, server_pid=servelab.process.pid if servelab.process else None)  # type: ignore[arg-type]
    load = LoadSpec(levels=(4,), measurement_interval_ms=400, stability_percentage=1000, max_windows=8, max_level_s=90)
    level, reported = perf_analyzer.measure_level(target, model, load, InputSpec(), 4.0)
    assert reported is not None, level.failures
    assert reported.inferences_per_s > 0 and not level.failures
    after = _stats(servelab, model)["inference_stats"]
    # a request without sequence_id or START would fail (Triton's rule): every one of them succeeded
    assert after["success"]["count"] - before["success"]["count"] >= 10
    assert after["fail"]["count"] == before["fail"]["count"]


def _client(kind: str, http: str, grpc: str) -> tuple[Any, Any]:
    module: Any = tgrpc if kind == "grpc" else thttp
    return module, module.InferenceServerClient(grpc if kind == "grpc" else http.removeprefix("http://"))


def _script(module: Any, client: Any) -> list[Any]:
    """Two interleaved sequences, a numeric string id, and three of Triton's errors."""
    def call(value: int, rows: int = 1, **kw: Any) -> Any:
        tensor = module.InferInput("INPUT", [rows, 1], "INT32")
        tensor.set_data_from_numpy(np.full((rows, 1), value, dtype=np.int32))
        try:
            r = client.infer("sequence_accumulator", [tensor], **kw)
        except InferenceServerException as exc:
            return ("error", str(exc))
        return (r.as_numpy("OUTPUT").tolist(), r.as_numpy("CONTROLS").tolist())

    return [
        call(1), call(1, sequence_id=5), call(3, sequence_id=5, sequence_start=True),
        call(4, sequence_id=6, sequence_start=True), call(2, sequence_id=5), call(2, 2, sequence_id=5),
        call(10, sequence_id=6, sequence_end=True), call(1, sequence_id=5, sequence_end=True), call(1, sequence_id=5),
        call(7, sequence_id=77, sequence_start=True, sequence_end=True),
    ]  # fmt: skip


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_triton_and_servelab_run_the_same_sequences_alike(triton: Endpoint, servelab: ServerProcess, protocol: str) -> None:
    t_module, t_client = _client(protocol, triton.extra["http"], triton.extra["grpc"])
    s_module, s_client = _client(protocol, servelab.http_url, servelab.grpc_address)
    from_triton, from_servelab = _script(t_module, t_client), _script(s_module, s_client)
    for t, s in zip(from_triton, from_servelab, strict=True):
        if t[0] == "error":  # Triton's text, which servelab may follow with a hint
            assert s[0] == "error" and s[1].startswith(t[1]), (t, s)
        else:
            assert s == t
    assert from_triton[2] == ([[3]], [[1, 0, 1, 5]]) and from_triton[7] == ([[6]], [[0, 1, 1, 5]])


@pytest.mark.parametrize("model", PYTHON_MODELS)
def test_both_servers_return_the_same_config_json(triton: Endpoint, servelab: ServerProcess, model: str) -> None:
    from_triton = thttp.InferenceServerClient(triton.extra["http"].removeprefix("http://")).get_model_config(model)
    from_servelab = thttp.InferenceServerClient(servelab.http_address).get_model_config(model)
    assert from_servelab == from_triton
    assert list(from_servelab) == list(from_triton)


def test_reshape_and_warmup_serve_alike(triton: Endpoint, servelab: ServerProcess) -> None:
    answers = []
    for http in (triton.extra["http"], servelab.http_url):
        client = thttp.InferenceServerClient(http.removeprefix("http://"))
        a, b = thttp.InferInput("INPUT0", [1, 2, 2], "FP32"), thttp.InferInput("INPUT1", [1, 4], "FP32")
        a.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(1, 2, 2))
        b.set_data_from_numpy(np.ones((1, 4), np.float32))
        result = client.infer("reshaped", [a, b])
        answers.append((result.as_numpy("OUTPUT0").tolist(), result.as_numpy("OUTPUT1").tolist()))
    assert answers[0] == answers[1] == ([[1.0, 2.0, 3.0, 4.0]], [[-1.0, 0.0, 1.0, 2.0]])
