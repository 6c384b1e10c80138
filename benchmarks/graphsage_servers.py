"""The servers of the GraphSAGE end-to-end rows, each started, measured over its protocols and stopped.

servelab (``servelab serve`` on one exported repository per layers runtime: the ``sage`` ensemble and, but
for TorchScript, ``sage_fused``; gRPC and REST binary), real TorchServe 0.12 with the GraphSAGE handler
(REST and gRPC, where its venv is installed), the real Triton 2.51 with the GraphSAGE python model of
servelab.bench.peers.triton_graphsage (gRPC and REST binary, the same OIP clients as servelab's rows) and the
TorchServe-style FastAPI app (REST JSON). Every server
is a subprocess on free ports of 127.0.0.1; the clients and the closed loop are in benchmarks/graphsage_wire.py,
the ratios between the rows in benchmarks/graphsage_e2e.py.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import sys
import textwrap
from pathlib import Path

from servelab.config.grpc_runtime import CLIENT_EXPERIMENTS, disable_grpc_experiments

disable_grpc_experiments(CLIENT_EXPERIMENTS)  # before grpc is imported, as graphsage_wire does

import aiohttp  # noqa: E402
import grpc.aio  # noqa: E402
import numpy as np  # noqa: E402
from graphsage_wire import (  # noqa: E402
    BASELINE_E2E,
    HOST,
    LABELS,
    MODELS,
    TORCHSERVE_E2E,
    TRITON_E2E,
    E2ERow,
    Load,
    TorchServeOptions,
    TritonOptions,
    _baseline_stats,
    _grpc_call,
    _json_call,
    _measure,
    _process,
    _rest_call,
    _servelab_stats,
    _torchserve_grpc_call,
    _triton_stats,
)

from servelab.bench._fetch import DownloadFailed  # noqa: E402
from servelab.bench.net import free_ports  # noqa: E402
from servelab.bench.peers._venv import PeerEnv  # noqa: E402

__all__ = ["BASELINE_APP", "baseline_row", "servelab_rows", "torchserve_rows", "triton_rows"]


def servelab_rows(
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
    rows = []
    # the fused model's dense graph runs on ONNX Runtime or OpenVINO; the torch repository's would be ORT
    for model in [m for m in MODELS if m == "sage" or runtime != "torch"]:
        framework = LABELS[runtime] + MODELS[model]
        stats = _servelab_stats(f"{base}/v2/models", model)
        async with grpc.aio.insecure_channel(grpc_target) as channel:
            call = _grpc_call(channel, classes, model)
            rows.append(await _measure(framework, "gRPC", call, queries, load, stats))
        connector = aiohttp.TCPConnector(limit=load.concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:
            call = _rest_call(session, f"{base}/v2/models/{model}/infer", classes)
            rows.append(await _measure(framework, "REST binary", call, queries, load, stats))
    return rows


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


def baseline_row(
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


def torchserve_rows(
    model_dir: Path, graph_dir: Path, queries: np.ndarray, classes: int, load: Load, opts: TorchServeOptions
) -> list[E2ERow]:
    """Real TorchServe with the GraphSAGE handler over REST and gRPC, or [] (and why, printed) where it
    is not installed."""
    from servelab.bench.peers.torchserve import JAVA_HINT, REQUIREMENTS
    from servelab.bench.peers.torchserve_graphsage import TorchServeGraphSagePeer, graphsage_artefacts
    from servelab.graph.model import load_model

    if shutil.which("java") is None:
        print(f"TorchServe row skipped: {JAVA_HINT}", flush=True)
        return []
    if not PeerEnv(opts.peers_dir, "torchserve", REQUIREMENTS).is_ready():
        print(f"TorchServe row skipped: no TorchServe venv under {opts.peers_dir} (run the live peer tests "
              "or `servelab compare` with a torchserve target once to install it)", flush=True)  # fmt: skip
        return []
    fanouts = load_model(model_dir)[0].config.fanouts
    with TorchServeGraphSagePeer(
        opts.peers_dir, graph_dir, fanouts, torch_threads=opts.torch_threads,
        batch_size=opts.batch_size, max_batch_delay_ms=opts.max_batch_delay_ms,
    ) as peer:  # fmt: skip
        peer.prepare(graphsage_artefacts(model_dir, peer.work_dir / "export"))
        endpoint = peer.start()
        return asyncio.run(_torchserve_clients(endpoint.url, endpoint.extra["grpc"], queries, classes, load))


async def _torchserve_clients(
    base: str, grpc_target: str, queries: np.ndarray, classes: int, load: Load
) -> list[E2ERow]:
    def no_stats() -> tuple[int, int]:
        return 0, 0  # TorchServe exposes no per-stage times: shares stay NaN

    connector = aiohttp.TCPConnector(limit=load.concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        call = _json_call(session, f"{base}/predictions/sage", classes)
        rest = await _measure(TORCHSERVE_E2E, "REST JSON", call, queries, load, no_stats)
    async with grpc.aio.insecure_channel(grpc_target) as channel:
        rpc = await _measure(TORCHSERVE_E2E, "gRPC", _torchserve_grpc_call(channel, classes), queries, load, no_stats)
    for row in (rest, rpc):
        row.sample_share = row.server_share = math.nan
    return [rest, rpc]


def triton_rows(repo: Path, queries: np.ndarray, classes: int, load: Load, opts: TritonOptions) -> list[E2ERow]:
    """The real Triton serving the GraphSAGE python model built from ``repo`` (the onnxruntime export the
    servelab rows served: same graph store, same layers ONNX), over gRPC and REST binary; [] (and why,
    printed) where Triton cannot be downloaded here."""
    from servelab.bench.peers.triton_graphsage import MODEL_NAME, TritonGraphSagePeer

    with TritonGraphSagePeer(
        opts.peers_dir, repo, instances=opts.instances, layers_threads=opts.layers_threads, progress=print
    ) as peer:
        try:
            peer.install()
        except DownloadFailed as exc:
            print(f"Triton row skipped: {str(exc)[:300]}", flush=True)
            return []
        peer.prepare_graphsage()
        endpoint = peer.start()
        http, grpc_target = endpoint.extra["http"], endpoint.extra["grpc"]
        return asyncio.run(_triton_clients(http, grpc_target, MODEL_NAME, queries, classes, load))


async def _triton_clients(
    base: str, grpc_target: str, model: str, queries: np.ndarray, classes: int, load: Load
) -> list[E2ERow]:
    stats = _triton_stats(f"{base}/v2/models", model)
    async with grpc.aio.insecure_channel(grpc_target) as channel:
        rpc = await _measure(TRITON_E2E, "gRPC", _grpc_call(channel, classes, model), queries, load, stats)
    connector = aiohttp.TCPConnector(limit=load.concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        call = _rest_call(session, f"{base}/v2/models/{model}/infer", classes)
        rest = await _measure(TRITON_E2E, "REST binary", call, queries, load, stats)
    for row in (rpc, rest):
        row.sample_share = math.nan  # Triton reports no per-stage times for a python model
    return [rpc, rest]
