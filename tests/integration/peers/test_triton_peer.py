"""The real Triton Inference Server 2.51 (python backend) and perf_analyzer 2.40, live, beside servelab.

Both are unpacked under the repo's ``.peers/`` on first use (about 15 s with a reachable registry, 330 MB
and 31 MB on disk). A test skips, saying why, only when a download is impossible (``DownloadFailed``); any
other failure to install or start fails it. The models are examples/triton_models, served from the same
files by both servers.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp

from harness.models import dense_onnx
from harness.peers import PEERS_DIR, installed, installed_perf_analyzer, triton_serving
from harness.repository import TINY_WEIGHTS
from servelab.bench.peers.base import Endpoint
from servelab.bench.specs import InputSpec, LoadSpec, TargetSpec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[3]
MODELS = ("add_sub", "image_preprocess", "ort_inside")
RNG = np.random.default_rng(3)
FEEDS: dict[str, dict[str, np.ndarray]] = {
    "add_sub": {"INPUT0": RNG.random(4, dtype=np.float32), "INPUT1": RNG.random(4, dtype=np.float32)},
    "image_preprocess": {"IMAGE": RNG.integers(0, 256, (64, 64, 3), dtype=np.uint8)},
    "ort_inside": {"INPUT": RNG.random((3, 64), dtype=np.float32)},
}
DATATYPES = {np.dtype(np.float32): "FP32", np.dtype(np.uint8): "UINT8"}


def _builder() -> Any:
    path = ROOT / "examples" / "triton_models" / "build_triton_models.py"
    spec = importlib.util.spec_from_file_location("build_triton_models", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _builder().build(tmp_path_factory.mktemp("triton-models") / "models")


@pytest.fixture(scope="module")
def triton(repo: Path) -> Iterator[Endpoint]:
    with triton_serving(repo / model for model in MODELS) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def triton_installed() -> None:
    from servelab.bench.peers._triton_install import TritonInstall

    installed(lambda: TritonInstall(PEERS_DIR).ensure())


@pytest.fixture(scope="module")
def servelab(repo: Path) -> Iterator[Endpoint]:
    from servelab.bench.peers.servelab_target import ServelabPeer

    loads = ("--load-model", "image_preprocess", "--load-model", "ort_inside")
    with ServelabPeer(repo, "add_sub", extra_args=loads) as peer:
        yield peer.start()


@pytest.fixture(scope="module")
def perf_analyzer() -> Any:
    return installed_perf_analyzer(percentile=None)


def _infer(endpoint: Endpoint, protocol: str, model: str) -> dict[str, np.ndarray]:
    """One request with stock tritonclient; every output by name."""
    module: Any = tgrpc if protocol == "grpc" else thttp
    url = endpoint.extra["grpc"] if protocol == "grpc" else endpoint.extra["http"].removeprefix("http://")
    client = module.InferenceServerClient(url)
    inputs = []
    for name, array in FEEDS[model].items():
        tensor = module.InferInput(name, list(array.shape), DATATYPES[array.dtype])
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = client.infer(model, inputs)
    outputs = result.get_response().outputs if protocol == "grpc" else result.get_response()["outputs"]
    names = [o.name if protocol == "grpc" else o["name"] for o in outputs]
    client.close()
    return {n: result.as_numpy(n) for n in names}


def _expected(repo: Path, model: str) -> dict[str, np.ndarray]:
    feed = FEEDS[model]
    if model == "add_sub":
        return {"OUTPUT0": feed["INPUT0"] + feed["INPUT1"], "OUTPUT1": feed["INPUT0"] - feed["INPUT1"]}
    if model == "image_preprocess":
        mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
        return {"PIXELS": np.moveaxis((feed["IMAGE"] / 255.0 - mean) / std, -1, 0)}
    session = ort.InferenceSession(str(repo / "ort_inside" / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    return {"OUTPUT": session.run(None, feed)[0]}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_triton_and_servelab_give_the_same_answers(
    triton: Endpoint, servelab: Endpoint, repo: Path, model: str, protocol: str
) -> None:
    from_triton = _infer(triton, protocol, model)
    from_servelab = _infer(servelab, protocol, model)
    expected = _expected(repo, model)
    assert sorted(from_triton) == sorted(from_servelab) == sorted(expected)
    for name, want in expected.items():
        assert from_triton[name].shape == want.shape and from_triton[name].dtype == from_servelab[name].dtype
        np.testing.assert_allclose(from_triton[name], want, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(from_servelab[name], from_triton[name])


def test_triton_is_the_real_server_on_loopback(triton: Endpoint) -> None:
    client = thttp.InferenceServerClient(triton.extra["http"].removeprefix("http://"))
    meta = client.get_server_metadata()
    assert meta["name"] == "triton" and meta["version"] == "2.51.0"
    assert client.get_model_config("add_sub")["backend"] == "python"
    assert all(u.split("//")[-1].startswith("127.0.0.1:") for k, u in triton.extra.items() if k in ("http", "grpc", "metrics"))
    stats = client.get_inference_statistics("add_sub")["model_stats"][0]
    assert int(stats["inference_count"]) > 0  # the answers above came from this Triton
    client.close()


def test_triton_rejects_a_bad_request_and_keeps_serving(triton: Endpoint) -> None:
    client = thttp.InferenceServerClient(triton.extra["http"].removeprefix("http://"))
    wrong = thttp.InferInput("INPUT0", [5], "FP32")
    wrong.set_data_from_numpy(np.zeros(5, np.float32))
    with pytest.raises(Exception, match="INPUT"):
        client.infer("add_sub", [wrong])
    client.close()
    np.testing.assert_allclose(_infer(triton, "http", "add_sub")["OUTPUT0"], _expected(Path(), "add_sub")["OUTPUT0"])


@pytest.mark.parametrize("server", ["servelab", "triton"])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_measures_and_parses(
    perf_analyzer: Any, request: pytest.FixtureRequest, server: str, protocol: str
) -> None:
    endpoint: Endpoint = request.getfixturevalue(server)
    url = endpoint.extra["grpc"] if protocol == "grpc" else endpoint.extra["http"]
    target = TargetSpec(f"oip-{protocol}", url, server_pid=endpoint.pid)  # type: ignore[arg-type]
    # a generous stability rule: the machine is shared, and this checks the plumbing, not a figure
    load = LoadSpec(measurement_interval_ms=300, stability_percentage=1000, max_windows=10, max_level_s=60)
    level, reported = perf_analyzer.measure_level(target, "add_sub", load, InputSpec(), 2.0)
    assert reported is not None, level.failures
    assert reported.level == 2 and reported.inferences_per_s > 0 and 0 < reported.p50_us <= reported.p99_us
    assert len(level.windows) >= 3 and level.stable and not level.failures
    # the windows rebuilt from the profile export agree with perf_analyzer's own figures
    assert level.summary.inferences_per_s == pytest.approx(reported.inferences_per_s, rel=0.05)
    assert level.summary.histogram.percentile(50) * 1e6 == pytest.approx(reported.p50_us, rel=0.1, abs=30)
    assert level.server is not None and level.server["compute_infer_us"] > 0  # its statistics-extension line
    assert level.server_rss_mb is not None and level.server_rss_mb > 20


def test_perf_analyzer_names_what_it_cannot_measure(perf_analyzer: Any) -> None:
    from servelab.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="OIP servers"):
        perf_analyzer.argv(TargetSpec("torchserve", "http://127.0.0.1:1"), "m", LoadSpec(), InputSpec(), 1.0)


def test_perf_analyzer_reports_an_unreachable_server_as_a_failed_level(perf_analyzer: Any) -> None:
    from servelab.bench.net import free_port

    target = TargetSpec("oip-http", f"http://127.0.0.1:{free_port()}")
    load = LoadSpec(measurement_interval_ms=100, max_windows=3, max_level_s=30)
    level, reported = perf_analyzer.measure_level(target, "add_sub", load, InputSpec(), 1.0)
    assert reported is None and level.summary.completed == 0
    assert level.failures and "perf_analyzer exited" in level.failures[0]


def _compare(repo: Path, model: str, targets: str, out: Path, *extra: str) -> dict[str, Any]:
    argv = [sys.executable, "-m", "servelab.cli", "compare", model, "--repo", str(repo), "--targets", targets,
            "--batch-sizes", "1", "--concurrency", "2", "--measurement-interval-ms", "200", "--max-windows", "3",
            "--baseline", targets.split(",")[0], "--peers-dir", str(PEERS_DIR), "--output", str(out), *extra]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


def test_compare_servelab_python_against_triton(triton_installed: None, repo: Path, tmp_path: Path) -> None:
    doc = _compare(repo, "add_sub", "servelab-python,triton@grpc", tmp_path / "c.json")
    rows = {r["target"]: r for r in doc["rows"]}
    assert sorted(rows) == ["servelab-python", "triton@grpc"], doc["targets"]
    for r in rows.values():
        assert r["requests_per_s"] > 0 and r["errors"] == 0
    described = {t["label"]: t["description"] for t in doc["targets"]}
    assert described["triton@grpc"]["version"] == "2.51.0" and "own model.py" in described["triton@grpc"]["served_as"]


def test_compare_serves_an_onnx_model_on_triton_through_a_labelled_python_model(
    triton_installed: None, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    dense_onnx(repo / "linear_onnx" / "1" / "model.onnx", TINY_WEIGHTS)
    (repo / "linear_onnx" / "config.pbtxt").write_text(
        'name: "linear_onnx"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
    )
    doc = _compare(repo, "linear", "servelab-onnxruntime,triton", tmp_path / "c.json")
    targets = [r["target"] for r in doc["rows"]]
    assert targets[0] == "servelab-onnxruntime" and targets[1].startswith("triton (python backend: generated")
    assert all(r["requests_per_s"] > 0 and r["errors"] == 0 for r in doc["rows"]), doc["targets"]
