"""The measuring half of the GraphSAGE end-to-end benchmark: clients, the closed loop, the row it fills.

Clients for servelab (grpc.aio with raw_input_contents, aiohttp with binary tensors), for TorchServe (its REST
and gRPC Predictions APIs, JSON body) and for the FastAPI baseline; ``_measure`` runs batch 1 and batch 32 at
concurrency 1 (P50/P99), then batch 32 at ``concurrency`` requests in flight (nodes/s), and reads the server's
sampling share from its statistics. Used by benchmarks/graphsage_e2e.py, which starts the servers.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.config.grpc_runtime import CLIENT_EXPERIMENTS, disable_grpc_experiments

# The clients (for servelab and TorchServe alike) skip grpcio's EventEngine thread hops: see grpc_runtime.
disable_grpc_experiments(CLIENT_EXPERIMENTS)

import aiohttp  # noqa: E402
import grpc.aio  # noqa: E402
import numpy as np  # noqa: E402
import orjson  # noqa: E402

from servelab.bench.net import http_status, wait_until  # noqa: E402
from servelab.protocol import grpc_service_pb2, grpc_service_pb2_grpc  # noqa: E402

HOST = "127.0.0.1"
BASELINE_E2E = "TorchServe-style (FastAPI + Python sampler + torch eager)"
TORCHSERVE_E2E = "TorchServe 0.12 (Python sampler + TorchScript)"
#: the published hybrid on the real Triton: python model with servelab's numba sampler + layers ONNX on onnxruntime
TRITON_E2E = "Triton 2.51 python backend (numba sampler + ONNX Runtime layers)"
PEERS_DIR = Path(__file__).resolve().parent.parent / ".peers"
LABELS = {
    "onnxruntime": "servelab + ONNX Runtime",
    "openvino": "servelab + OpenVINO",
    "torch": "servelab + TorchScript",
}
#: served models -> label suffix: the three-model ensemble and the one-call fused model
MODELS = {"sage": "", "sage_fused": " (fused)"}
#: one request of the given node ids; resolves when the answer is checked
Call = Callable[[np.ndarray], Awaitable[None]]


@dataclass
class E2ERow:
    framework: str
    protocol: str
    b1_p50_ms: float
    b1_p99_ms: float
    b32_p50_ms: float
    b32_p99_ms: float
    nodes_per_s: float
    concurrency: int
    requests: int
    errors: int
    #: (sample + gather) time reported by the server / client latency, batch 32 at concurrency 1
    sample_share: float = math.nan
    #: the ensemble's own time in the server / client latency (the rest is transport and front-end)
    server_share: float = math.nan
    #: against the FastAPI baseline (BASELINE_E2E)
    speedup_b1_p50: float = math.nan
    throughput_ratio: float = math.nan
    #: against real TorchServe (TORCHSERVE_E2E), when it ran
    vs_torchserve_b1_p50: float = math.nan
    vs_torchserve_nodes_per_s: float = math.nan


@dataclass(frozen=True)
class TorchServeOptions:
    """Where TorchServe's venv lives and how it serves: torch threads, TorchServe's batch size."""

    peers_dir: Path = PEERS_DIR
    torch_threads: int = 1
    batch_size: int = 1
    max_batch_delay_ms: int = 1


@dataclass(frozen=True)
class TritonOptions:
    """Where Triton lives and how its GraphSAGE python model runs: stub processes, onnxruntime threads."""

    peers_dir: Path = PEERS_DIR
    instances: int = 1
    layers_threads: int = 1


@dataclass(frozen=True)
class Load:
    """How much to send: calls per latency phase, seconds per phase, requests in flight for nodes/s."""

    warmup: int = 50
    calls: int = 1000
    duration_s: float = 6.0
    concurrency: int = 8




def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    wait_until(lambda: http_status(url)[0] == 200, timeout_s, url,
               lambda: None if proc.poll() is None else f"exit code {proc.returncode}")


@contextmanager
def _process(cmd: list[str], ready_url: str, log: Path, env: dict[str, str]) -> Iterator[None]:
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env})
    try:
        _wait_ready(ready_url, proc)
        yield
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}\n{log.read_text(errors='replace')[-3000:]}") from None
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return orjson.loads(r.read())


# ----- clients -----
def _grpc_call(channel: grpc.aio.Channel, classes: int, model: str = "sage") -> Call:
    stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)

    async def call(ids: np.ndarray) -> None:
        req = grpc_service_pb2.ModelInferRequest(model_name=model)
        req.inputs.add(name="node_ids", datatype="INT64", shape=[ids.size])
        req.outputs.add(name="logits")
        req.raw_input_contents.append(ids.tobytes())
        resp = await stub.ModelInfer(req)
        if len(resp.raw_output_contents[0]) != ids.size * classes * 4:
            raise RuntimeError(f"gRPC: {len(resp.raw_output_contents[0])} bytes of logits for {ids.size} ids")

    return call


def _rest_call(session: aiohttp.ClientSession, url: str, classes: int) -> Call:
    async def call(ids: np.ndarray) -> None:
        header = orjson.dumps(
            {
                "inputs": [
                    {
                        "name": "node_ids",
                        "shape": [ids.size],
                        "datatype": "INT64",
                        "parameters": {"binary_data_size": ids.nbytes},
                    }
                ],
                "outputs": [{"name": "logits", "parameters": {"binary_data": True}}],
            }
        )
        headers = {
            "Inference-Header-Content-Length": str(len(header)),
            "Content-Type": "application/octet-stream",
        }
        async with session.post(url, data=header + ids.tobytes(), headers=headers) as r:
            body = await r.read()
            if r.status != 200:
                raise RuntimeError(f"REST: {r.status} {body[:200]!r}")
            n = int(r.headers["Inference-Header-Content-Length"])
            if len(body) - n != ids.size * classes * 4:
                raise RuntimeError(f"REST: {len(body) - n} bytes of logits for {ids.size} ids")

    return call


def _json_call(session: aiohttp.ClientSession, url: str, classes: int) -> Call:
    async def call(ids: np.ndarray) -> None:
        async with session.post(url, data=orjson.dumps({"node_ids": ids.tolist()})) as r:
            body = await r.read()
            if r.status != 200:
                raise RuntimeError(f"baseline: {r.status} {body[:200]!r}")
            logits = orjson.loads(body)["logits"]
            if len(logits) != ids.size or len(logits[0]) != classes:
                raise RuntimeError("baseline: wrong logits shape")

    return call


def _torchserve_grpc_call(channel: grpc.aio.Channel, classes: int) -> Call:
    """TorchServe's gRPC Predictions API with the JSON body its REST API takes (input ``data``)."""
    from servelab.bench.peers.torchserve_grpc import predictions

    predict = predictions(channel)

    async def call(ids: np.ndarray) -> None:
        logits = orjson.loads(await predict("sage", {"data": orjson.dumps({"node_ids": ids.tolist()})}))["logits"]
        if len(logits) != ids.size or len(logits[0]) != classes:
            raise RuntimeError("TorchServe gRPC: wrong logits shape")

    return call


async def _closed_loop(
    call: Call, batches: np.ndarray, concurrency: int, load: Load
) -> tuple[np.ndarray, float, int]:
    """Latencies (ms) of measured calls, their wall time (s) and the error count."""
    latencies: list[float] = []
    errors = [0]
    cursor = iter(range(1 << 62))
    for i in range(load.warmup):
        await call(batches[i % len(batches)])
    start = time.perf_counter()
    stop_at = start + load.duration_s

    async def worker() -> None:
        while time.perf_counter() < stop_at and len(latencies) < load.calls * max(1, concurrency):
            ids = batches[next(cursor) % len(batches)]
            t0 = time.perf_counter_ns()
            try:
                await call(ids)
            except Exception:
                errors[0] += 1
                continue
            latencies.append((time.perf_counter_ns() - t0) / 1e6)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return np.array(latencies or [math.nan]), time.perf_counter() - start, errors[0]


#: () -> (sampling ns, whole-pipeline ns) the server has spent so far
StatsFn = Callable[[], tuple[int, int]]


def _servelab_stats(models_url: str, model: str = "sage") -> StatsFn:
    """Sample + gather ns from the stages of graphsage_sampler (ensemble) or of the fused model, and the
    served model's success ns."""
    staged = "graphsage_sampler" if model == "sage" else model

    def read() -> tuple[int, int]:
        stages = _get_json(f"{models_url}/{staged}/stats")["model_stats"][0]["stages"]
        sage = _get_json(f"{models_url}/{model}/stats")["model_stats"][0]["inference_stats"]["success"]
        instances = stages if isinstance(stages, list) else [stages]  # one dict per instance when there are several
        return sum(int(s["sample_ns"]) + int(s["gather_ns"]) for s in instances), int(sage["ns"])

    return read


def _triton_stats(models_url: str, model: str = "sage") -> StatsFn:
    """Triton's statistics extension: the model's success ns (it reports no sampling stage: 0)."""

    def read() -> tuple[int, int]:
        success = _get_json(f"{models_url}/{model}/stats")["model_stats"][0]["inference_stats"]["success"]
        return 0, int(success["ns"])

    return read


def _baseline_stats(base: str) -> StatsFn:
    def read() -> tuple[int, int]:
        t = _get_json(f"{base}/stats")
        return t["sample_ns"] + t["gather_ns"], t["sample_ns"] + t["gather_ns"] + t["layers_ns"]

    return read


async def _measure(
    framework: str, protocol: str, call: Call, queries: np.ndarray, load: Load, stats: StatsFn
) -> E2ERow:
    b1 = queries.reshape(-1, 1)
    b32 = queries[: len(queries) // 32 * 32].reshape(-1, 32)
    lat1, _, err1 = await _closed_loop(call, b1, 1, load)
    before = stats()
    lat32, _, err32 = await _closed_loop(call, b32, 1, Load(0, load.calls, load.duration_s, 1))
    after = stats()
    latt, wallt, errt = await _closed_loop(call, b32, load.concurrency, load)
    client_ns = float(np.nansum(lat32)) * 1e6
    row = E2ERow(
        framework=framework,
        protocol=protocol,
        b1_p50_ms=float(np.percentile(lat1, 50)),
        b1_p99_ms=float(np.percentile(lat1, 99)),
        b32_p50_ms=float(np.percentile(lat32, 50)),
        b32_p99_ms=float(np.percentile(lat32, 99)),
        nodes_per_s=32 * int(np.isfinite(latt).sum()) / wallt,
        concurrency=load.concurrency,
        requests=int(lat1.size + lat32.size + latt.size),
        errors=err1 + err32 + errt,
    )
    if client_ns > 0:
        row.sample_share = (after[0] - before[0]) / client_ns
        row.server_share = (after[1] - before[1]) / client_ns
    print(
        f"  {framework} / {protocol}: b1 {row.b1_p50_ms:.2f}/{row.b1_p99_ms:.2f} ms, b32 {row.b32_p50_ms:.2f}/"
        f"{row.b32_p99_ms:.2f} ms, {row.nodes_per_s:,.0f} nodes/s (c={load.concurrency}), errors {row.errors}",
        flush=True,
    )
    return row
