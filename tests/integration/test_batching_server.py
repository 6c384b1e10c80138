"""Dynamic batching through a real `servelab serve`: 64 concurrent batch-1 gRPC clients against a
model with max_batch_size 32 and a queue delay; /metrics shows the merged executions, every answer
equals the unbatched one, and the metric counts equal the requests sent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc.aio as tca
from prometheus_client.parser import text_string_to_metric_families

from harness.clients import infer_input
from harness.repository import dense_model
from harness.servers import ServerProcess, running_server

CLIENTS = 64
PER_CLIENT = 8
FEATURES = 64
LABELS = (("model", "mlp_batched"), ("version", "1"))


@pytest.fixture(scope="module")
def batching_server(tmp_path_factory: pytest.TempPathFactory, log_dir: Path) -> Iterator[tuple[ServerProcess, np.ndarray, np.ndarray]]:
    """``mlp_batched``: FEATURES -> 256 -> ReLU -> 16 on onnxruntime, batched up to 32 with a 20 ms delay."""
    rng = np.random.default_rng(7)
    w1 = (rng.standard_normal((FEATURES, 256)) / 8).astype(np.float32)
    w2 = (rng.standard_normal((256, 16)) / 16).astype(np.float32)
    repo = tmp_path_factory.mktemp("batching_repo")
    dense_model(repo, "mlp_batched", w1, w2, max_batch_size=32,
                 extra="dynamic_batching { max_queue_delay_microseconds: 20000 }\n")
    with running_server(repo, log_dir, "batching") as server:
        yield server, w1, w2


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
            result = await client.infer("mlp_batched", [infer_input(tca, "INPUT", xs[i, j])])
            outs.append(result.as_numpy("OUTPUT"))
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
