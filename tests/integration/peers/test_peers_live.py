"""TorchServe 0.12 and MLServer 1.7.1, live: their own venvs (installed on first use under the repo's
``.peers/``), real processes, real requests. Slow; skipped with the reason when an environment cannot be
installed (no network, no Java)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from harness.models import dense_onnx, linear_torchscript
from harness.repository import TINY_WEIGHTS
from servelab.bench.net import http_status
from servelab.bench.peers.base import Endpoint, ModelArtefacts, Peer, TensorInfo
from servelab.errors import Unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # first run installs two venvs (~4 min)

PEERS_DIR = Path(__file__).resolve().parents[3] / ".peers"
X = np.random.default_rng(1).random((3, 4), dtype=np.float32)


def _start_or_skip(peer: Peer, arts: ModelArtefacts) -> Endpoint:
    try:
        peer.install()
    except Unavailable as exc:
        pytest.skip(f"{peer.name} environment unavailable: {str(exc)[:300]}")
    peer.prepare(arts)
    return peer.start()


@pytest.fixture(scope="module")
def torchserve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    if shutil.which("java") is None:
        pytest.skip("TorchServe needs Java 17: apt-get install -y openjdk-17-jre-headless")
    from servelab.bench.peers.torchserve import TorchServePeer

    pt = linear_torchscript(tmp_path_factory.mktemp("ts") / "model.pt", TINY_WEIGHTS)
    arts = ModelArtefacts(
        "linear",
        (TensorInfo("INPUT__0", "FP32", (4,)),),
        (TensorInfo("OUTPUT__0", "FP32", (3,)),),
        torchscript=pt,
    )
    with TorchServePeer(PEERS_DIR, batch_size=4, max_batch_delay_ms=5) as peer:
        ep = _start_or_skip(peer, arts)
        yield ep
        logs = peer.work_dir / "logs"
        assert sum(f.stat().st_size for f in logs.iterdir()) < 1_000_000, "TorchServe should log quietly"


@pytest.fixture(scope="module")
def mlserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    from servelab.bench.peers.mlserver import MLServerPeer

    onnx = dense_onnx(tmp_path_factory.mktemp("mls") / "model.onnx", TINY_WEIGHTS)
    arts = ModelArtefacts(
        "linear", (TensorInfo("INPUT", "FP32", (4,)),), (TensorInfo("OUTPUT", "FP32", (3,)),), onnx=onnx
    )
    with MLServerPeer(PEERS_DIR, max_batch_size=4, max_batch_time_s=0.002) as peer:
        yield _start_or_skip(peer, arts)


def test_torchserve_predicts_and_batches(torchserve: Endpoint) -> None:
    assert torchserve.kind == "torchserve"
    status, raw = http_status(
        f"{torchserve.url}/predictions/linear", "POST", json.dumps({"INPUT__0": X.tolist()}).encode()
    )
    assert status == 200, raw
    np.testing.assert_allclose(np.array(json.loads(raw)["outputs"]), X @ TINY_WEIGHTS, rtol=1e-5)
    status, raw = http_status(f"{torchserve.extra['management']}/models/linear")
    described = json.loads(raw)[0]
    assert described["batchSize"] == 4 and described["maxBatchDelay"] == 5
    assert http_status(f"{torchserve.url}/predictions/linear", "POST", b'{"a": 1, "b": 2}')[0] == 400


def test_torchserve_through_the_bench_client(torchserve: Endpoint) -> None:
    from servelab.bench import InputSpec, LoadSpec, TargetSpec, run_sweep

    target = TargetSpec("torchserve", torchserve.url, server_pid=torchserve.pid)
    load = LoadSpec(
        levels=(4.0,), measurement_interval_ms=200, max_windows=3, warmup_requests=5, max_level_s=10.0
    )
    sweep = run_sweep(
        target, "linear", load, InputSpec(batch_size=2, shapes={"INPUT__0": (4,)}), measure_ceiling=False
    )
    level = sweep.levels[0]
    assert level.summary.completed > 0 and not level.errors
    assert level.server_rss_mb is not None and level.server_rss_mb > 50  # java + python worker


def test_mlserver_rest_and_grpc(mlserver: Endpoint) -> None:
    body = {"inputs": [{"name": "INPUT", "shape": [3, 4], "datatype": "FP32", "data": X.ravel().tolist()}]}
    status, raw = http_status(f"{mlserver.url}/v2/models/linear/infer", "POST", json.dumps(body).encode())
    assert status == 200, raw
    out = json.loads(raw)["outputs"][0]
    np.testing.assert_allclose(np.array(out["data"]).reshape(out["shape"]), X @ TINY_WEIGHTS, rtol=1e-5)

    import grpc

    from servelab.bench._grpc_client import INFER_METHOD, encode_infer_request
    from servelab.protocol import grpc_service_pb2

    with grpc.insecure_channel(mlserver.extra["grpc"]) as channel:
        raw = channel.unary_unary(INFER_METHOD)(encode_infer_request("linear", "", {"INPUT": X}), timeout=10)
    reply = grpc_service_pb2.ModelInferResponse.FromString(raw)
    got = np.frombuffer(reply.raw_output_contents[0], dtype=np.float32).reshape(3, 3)
    np.testing.assert_allclose(got, X @ TINY_WEIGHTS, rtol=1e-5)


def test_mlserver_through_the_bench_client(mlserver: Endpoint) -> None:
    from servelab.bench import InputSpec, LoadSpec, TargetSpec, run_sweep

    target = TargetSpec("oip-http", mlserver.url, binary=False, server_pid=mlserver.pid)
    load = LoadSpec(
        levels=(4.0,), measurement_interval_ms=200, max_windows=3, warmup_requests=5, max_level_s=10.0
    )
    sweep = run_sweep(target, "linear", load, InputSpec(batch_size=2), measure_ceiling=False)
    assert sweep.levels[0].summary.completed > 0 and not sweep.levels[0].errors


def test_a_failed_install_says_what_failed(tmp_path: Path) -> None:
    from servelab.bench.peers._venv import PeerEnv

    env = PeerEnv(tmp_path, "broken", ["servelab-no-such-package-exists==0.0.0"])
    with pytest.raises(Unavailable, match="could not install broken's environment"):
        env.ensure(timeout_s=300)
    assert not env.is_ready()
