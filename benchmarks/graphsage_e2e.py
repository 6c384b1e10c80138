"""End-to-end GraphSAGE rows for benchmarks/graphsage.py: the `sage` ensemble behind `servelab serve`.

One server per layers runtime (ONNX Runtime, OpenVINO, TorchScript), each a subprocess on free ports
of 127.0.0.1 serving a repository written by ``export_repository``; and the TorchServe-style baseline:
a minimal FastAPI app in a subprocess running the pure-Python sampler and eager torch in one handler,
JSON in and out. Clients run in this process (grpc.aio with raw_input_contents, aiohttp with binary
tensors), closed loop: batch 1 and batch 32 at concurrency 1 (P50/P99), then batch 32 at
``concurrency`` requests in flight (nodes/s). Sampling share comes from the server's statistics
(``stages`` of graphsage_sampler), as a share of the client-side latency of the same requests.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc.aio
import numpy as np
import orjson

from servelab.graph.export import export_repository
from servelab.protocol import grpc_service_pb2, grpc_service_pb2_grpc

HOST = "127.0.0.1"
BASELINE_E2E = "TorchServe-style (FastAPI + Python sampler + torch eager)"
LABELS = {
    "onnxruntime": "servelab + ONNX Runtime",
    "openvino": "servelab + OpenVINO",
    "torch": "servelab + TorchScript",
}
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
    speedup_b1_p50: float = math.nan
    throughput_ratio: float = math.nan


@dataclass(frozen=True)
class Load:
    """How much to send: calls per latency phase, seconds per phase, requests in flight for nodes/s."""

    warmup: int = 50
    calls: int = 1000
    duration_s: float = 6.0
    concurrency: int = 8


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((HOST, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)  # poll interval, not synchronisation
    raise RuntimeError(f"{url} not ready within {timeout_s} s")


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
def _grpc_call(channel: grpc.aio.Channel, classes: int) -> Call:
    stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)

    async def call(ids: np.ndarray) -> None:
        req = grpc_service_pb2.ModelInferRequest(model_name="sage")
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


def _servelab_stats(models_url: str) -> StatsFn:
    """Sample + gather ns from graphsage_sampler's stages, and the sage ensemble's success ns."""

    def read() -> tuple[int, int]:
        sampler = _get_json(f"{models_url}/graphsage_sampler/stats")["model_stats"][0]["stages"]
        sage = _get_json(f"{models_url}/sage/stats")["model_stats"][0]["inference_stats"]["success"]
        return int(sampler["sample_ns"]) + int(sampler["gather_ns"]), int(sage["ns"])

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


# ----- servers -----
def _servelab_rows(
    repo: Path, runtime: str, queries: np.ndarray, classes: int, load: Load, logs: Path, env: dict[str, str]
) -> list[E2ERow]:
    http, grpc_port, metrics, mgmt = free_ports(4)
    cmd = [
        sys.executable, "-m", "servelab.cli", "serve", str(repo), "--host", HOST, "--http-port", str(http),
        "--grpc-port", str(grpc_port), "--metrics-port", str(metrics), "--management-port", str(mgmt),
        "--log-level", "warning",
    ]  # fmt: skip
    base = f"http://{HOST}:{http}"
    with _process(cmd, f"{base}/v2/health/ready", logs / f"servelab-{runtime}.log", env):
        return asyncio.run(_servelab_clients(base, f"{HOST}:{grpc_port}", runtime, queries, classes, load))


async def _servelab_clients(
    base: str, grpc_target: str, runtime: str, queries: np.ndarray, classes: int, load: Load
) -> list[E2ERow]:
    framework = LABELS[runtime]
    stats = _servelab_stats(f"{base}/v2/models")
    async with grpc.aio.insecure_channel(grpc_target) as channel:
        grpc_row = await _measure(framework, "gRPC", _grpc_call(channel, classes), queries, load, stats)
    connector = aiohttp.TCPConnector(limit=load.concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        call = _rest_call(session, f"{base}/v2/models/sage/infer", classes)
        rest_row = await _measure(framework, "REST binary", call, queries, load, stats)
    return [grpc_row, rest_row]


BASELINE_APP = '''\
"""TorchServe-style GraphSAGE handler: Python sampler + torch eager in one request handler, JSON."""
import sys, time
import numpy as np, torch, uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import ORJSONResponse
from servelab.graph.model import load_model
from servelab.graph.sampler import PythonSampler, gather_features
from servelab.graph.store import GraphStore

model_dir, graph_dir, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
model, _ = load_model(model_dir)
store = GraphStore.open(graph_dir)
sampler = PythonSampler(store, model.config.fanouts, 0)
totals = {"sample_ns": 0, "gather_ns": 0, "layers_ns": 0, "count": 0}
app = FastAPI()


@app.get("/ping")
async def ping():
    return {"status": "Healthy"}


@app.get("/stats")
async def stats():
    return totals


@app.post("/predictions/sage")
async def predict(request: Request):
    ids = np.asarray((await request.json())["node_ids"], dtype=np.int64)
    t0 = time.perf_counter_ns()
    block = sampler.sample(ids)
    t1 = time.perf_counter_ns()
    x = gather_features(store, block.nodes)
    t2 = time.perf_counter_ns()
    with torch.inference_mode():
        logits, _ = model(torch.from_numpy(x), torch.from_numpy(block.nbr1), torch.from_numpy(block.nbr2))
    totals["sample_ns"] += t1 - t0
    totals["gather_ns"] += t2 - t1
    totals["layers_ns"] += time.perf_counter_ns() - t2
    totals["count"] += 1
    return ORJSONResponse({"logits": logits.numpy().tolist()})


uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", loop="uvloop", http="httptools")
'''


def _baseline_row(
    model_dir: Path, graph_dir: Path, queries: np.ndarray, classes: int, load: Load, logs: Path
) -> E2ERow:
    (port,) = free_ports(1)
    app = logs / "torchserve_style_app.py"
    app.write_text(textwrap.dedent(BASELINE_APP))
    base = f"http://{HOST}:{port}"
    cmd = [sys.executable, str(app), str(model_dir), str(graph_dir), str(port)]
    with _process(cmd, f"{base}/ping", logs / "baseline.log", {}):
        return asyncio.run(_baseline_clients(base, queries, classes, load))


async def _baseline_clients(base: str, queries: np.ndarray, classes: int, load: Load) -> E2ERow:
    connector = aiohttp.TCPConnector(limit=load.concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        call = _json_call(session, f"{base}/predictions/sage", classes)
        return await _measure(BASELINE_E2E, "REST JSON", call, queries, load, _baseline_stats(base))


def run_e2e(
    model_dir: Path,
    graph_dir: Path,
    runtimes: list[str],
    queries: np.ndarray,
    classes: int,
    load: Load,
    workdir: Path,
    server_env: dict[str, str],
) -> list[E2ERow]:
    """Every servelab runtime over gRPC and REST binary, then the baseline; ratios against it."""
    rows: list[E2ERow] = []
    for runtime in runtimes:
        repo = workdir / f"repo-{runtime}"
        export_repository(model_dir, graph_dir, repo, runtime=runtime)
        print(f"serving {repo} ({runtime}) ...", flush=True)
        rows += _servelab_rows(repo, runtime, queries, classes, load, workdir, server_env)
    print("serving the TorchServe-style baseline ...", flush=True)
    base = _baseline_row(model_dir, graph_dir, queries, classes, load, workdir)
    rows.append(base)
    for row in rows:
        row.speedup_b1_p50 = base.b1_p50_ms / row.b1_p50_ms
        row.throughput_ratio = row.nodes_per_s / base.nodes_per_s
    return rows
