"""Dynamic batching through a real `servelab serve`: 64 concurrent batch-1 gRPC clients against a
model with max_batch_size 32 and a queue delay; /metrics shows the merged executions, every answer
equals the unbatched one, and the metric counts equal the requests sent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
import tritonclient.grpc.aio as tca
from conftest import ServerProcess
from onnx import TensorProto, helper
from prometheus_client.parser import text_string_to_metric_families

CLIENTS = 64
PER_CLIENT = 8
FEATURES = 64
LABELS = (("model", "mlp_batched"), ("version", "1"))


def _mlp(path: Path) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    w1 = (rng.standard_normal((FEATURES, 256)) / 8).astype(np.float32)
    w2 = (rng.standard_normal((256, 16)) / 16).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", FEATURES])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])
    inits = [helper.make_tensor(n, TensorProto.FLOAT, w.shape, w.reshape(-1).tolist()) for n, w in (("W1", w1), ("W2", w2))]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "W2"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "mlp", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return w1, w2


@pytest.fixture(scope="module")
def batching_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, np.ndarray, np.ndarray]]:
    repo = tmp_path_factory.mktemp("batching_repo")
    w1, w2 = _mlp(repo / "mlp_batched" / "1" / "model.onnx")
    (repo / "mlp_batched" / "config.pbtxt").write_text(
        'name: "mlp_batched"\nbackend: "onnxruntime"\nmax_batch_size: 32\n'
        f'input [{{ name: "x" data_type: TYPE_FP32 dims: [{FEATURES}] }}]\n'
        'output [{ name: "y" data_type: TYPE_FP32 dims: [16] }]\n'
        "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
    )
    server = ServerProcess(repo, tmp_path_factory.mktemp("logs") / "batching.log").start()
    try:
        yield server, w1, w2
    finally:
        code = server.stop()
    assert code == 0, server.log_tail()


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_concurrent_batch_one_clients_are_merged(batching_server: tuple[ServerProcess, np.ndarray, np.ndarray]) -> None:
    server, w1, w2 = batching_server
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((CLIENTS, PER_CLIENT, 1, FEATURES)).astype(np.float32)

    async def client_loop(client: tca.InferenceServerClient, i: int) -> list[np.ndarray]:
        outs = []
        for j in range(PER_CLIENT):
            inp = tca.InferInput("x", [1, FEATURES], "FP32")
            inp.set_data_from_numpy(xs[i, j])
            result = await client.infer("mlp_batched", [inp])
            outs.append(result.as_numpy("y"))
        return outs

    async def main() -> list[list[np.ndarray]]:
        client = tca.InferenceServerClient(server.grpc_address)
        try:
            return await asyncio.gather(*(client_loop(client, i) for i in range(CLIENTS)))
        finally:
            await client.close()

    answers = asyncio.run(main())
    for i in range(CLIENTS):
        for j in range(PER_CLIENT):
            expected = np.maximum(xs[i, j] @ w1, 0) @ w2  # the unbatched answer
            np.testing.assert_allclose(answers[i][j], expected, rtol=1e-4, atol=1e-5)

    samples = _scrape(server.metrics_url)
    sent = CLIENTS * PER_CLIENT
    assert samples[("nv_inference_request_success", LABELS)] == sent
    assert samples[("nv_inference_request_failure", LABELS)] == 0
    assert samples[("nv_inference_count", LABELS)] == sent
    assert samples[("servelab_batch_size_sum", LABELS)] == sent
    executions = samples[("nv_inference_exec_count", LABELS)]
    assert samples[("servelab_batch_size_count", LABELS)] == executions
    assert sent / executions >= 16, f"average executed batch {sent / executions:.1f} < 16"
    assert samples[("servelab_request_duration_seconds_count", LABELS)] == sent
    assert samples[("nv_inference_pending_request_count", LABELS)] == 0
    # the HTTP port serves the same registry
    assert _scrape(server.http_url)[("nv_inference_count", LABELS)] == sent
