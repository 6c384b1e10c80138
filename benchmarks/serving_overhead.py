"""Serving overhead: servelab REST JSON, REST binary, gRPC and a bare FastAPI + onnxruntime baseline.

    python benchmarks/serving_overhead.py [--duration-s 3] [--concurrency 1 8 64]

Batch-1 requests for Triton's ``simple`` (INT32 [1, 16] add/sub) at each concurrency, closed loop,
from aiohttp / grpc.aio clients in this process (the servers run in their own processes). Targets are
measured in interleaved rounds (baseline, then each servelab protocol, per concurrency, ``--rounds``
times; the median round is kept) so that machine noise hits them alike. Reports requests/s, P50 and
P99 per (target, concurrency), each servelab target's ratio to the baseline measured in the same run,
and the server-side time per request (wire decode, queue, compute, wire encode) read from servelab's
statistics extension. Writes benchmarks/results/serving_overhead.json.

The baseline is ``servelab.bench.peers.fastapi_ort``: a minimal FastAPI + onnxruntime app (OIP JSON,
session in the thread pool), the "ONNX Runtime + Flask" row of the published comparisons.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from servelab.bench.results_md import add_results_md_options, write_results
from servelab.config.grpc_runtime import CLIENT_EXPERIMENTS, disable_grpc_experiments

disable_grpc_experiments(CLIENT_EXPERIMENTS)  # the gRPC client as servelab's own (servelab.config.grpc_runtime)

import aiohttp  # noqa: E402
import grpc.aio  # noqa: E402
import numpy as np  # noqa: E402
import orjson  # noqa: E402
from _examples import simple_repository  # noqa: E402

from servelab.bench.net import free_ports  # noqa: E402
from servelab.bench.serverproc import running, servelab_serve  # noqa: E402
from servelab.config.signals import exit_on_sigterm  # noqa: E402
from servelab.protocol import grpc_service_pb2 as pb  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "serving_overhead.json"
RESULTS_MD = HERE / "RESULTS.md"
SECTION = "serving_overhead"  # the section of RESULTS_MD this script writes
A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.ones((1, 16), dtype=np.int32)
EXPECTED = (A + B).reshape(-1).tolist()




# ----- one request per protocol -----
JSON_BODY = orjson.dumps({"inputs": [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": A.reshape(-1).tolist()},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": B.reshape(-1).tolist()},
]})
_BIN_HEADER = orjson.dumps({
    "inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}},
    ],
    "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                {"name": "OUTPUT1", "parameters": {"binary_data": True}}],
})
BINARY_BODY = _BIN_HEADER + A.tobytes() + B.tobytes()
BINARY_HEADERS = {"Inference-Header-Content-Length": str(len(_BIN_HEADER)), "Content-Type": "application/octet-stream"}


def _grpc_request() -> bytes:
    msg = pb.ModelInferRequest(model_name="simple")
    for name, arr in (("INPUT0", A), ("INPUT1", B)):
        t = msg.inputs.add(name=name, datatype="INT32")
        t.shape.extend(arr.shape)
        msg.raw_input_contents.append(arr.tobytes())
    return msg.SerializeToString()


Call = Callable[[], Awaitable[None]]


def _http_call(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str], binary: bool) -> Call:
    async def call() -> None:
        async with session.post(url, data=body, headers=headers) as r:
            payload = await r.read()
            if r.status != 200:
                raise RuntimeError(f"{url}: {r.status} {payload[:200]!r}")
            if binary:
                n = int(r.headers["Inference-Header-Content-Length"])
                got = np.frombuffer(payload[n : n + 64], dtype=np.int32).tolist()
            else:
                got = orjson.loads(payload)["outputs"][0]["data"]
            if got != EXPECTED:
                raise RuntimeError(f"{url}: wrong answer {got[:4]}")

    return call


def _grpc_call(channel: grpc.aio.Channel) -> Call:
    method = channel.unary_unary(
        "/inference.GRPCInferenceService/ModelInfer",
        request_serializer=None, response_deserializer=pb.ModelInferResponse.FromString,
    )
    body = _grpc_request()

    async def call() -> None:
        response = await method(body)
        if np.frombuffer(response.raw_output_contents[0], dtype=np.int32).tolist() != EXPECTED:
            raise RuntimeError("grpc: wrong answer")

    return call


async def _closed_loop(call: Call, concurrency: int, warmup_s: float, duration_s: float) -> dict[str, Any]:
    latencies: list[int] = []
    errors: list[str] = []
    measure_from = time.perf_counter() + warmup_s
    stop_at = measure_from + duration_s

    async def worker() -> None:
        while True:
            t0 = time.perf_counter()
            if t0 >= stop_at:
                return
            try:
                await call()
            except Exception as exc:
                errors.append(repr(exc)[:200])
                continue
            if t0 >= measure_from:
                latencies.append(time.perf_counter_ns() - int(t0 * 1e9))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    lat = np.array(latencies, dtype=np.float64) / 1e6 if latencies else np.zeros(1)
    return {
        "concurrency": concurrency,
        "requests": len(latencies),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "requests_per_s": round(len(latencies) / duration_s, 1),
        "p50_ms": round(float(np.percentile(lat, 50)), 3),
        "p99_ms": round(float(np.percentile(lat, 99)), 3),
    }


TARGETS = ("baseline_fastapi_ort_json", "servelab_rest_json", "servelab_rest_binary", "servelab_grpc")
_PARTS = ("decode", "queue", "compute", "encode")


def _server_split(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """Server-side microseconds per request between two /v2/models/simple/stats snapshots."""
    def totals(doc: dict[str, Any]) -> dict[str, tuple[int, int]]:
        m = doc["model_stats"][0]
        s, w = m["inference_stats"], m.get("wire_stats", {})
        compute = sum(s[k]["ns"] for k in ("compute_input", "compute_infer", "compute_output"))
        return {
            "requests": (s["success"]["count"], s["success"]["ns"]),
            "decode": (w.get("decode", {}).get("count", 0), w.get("decode", {}).get("ns", 0)),
            "queue": (s["queue"]["count"], s["queue"]["ns"]),
            "compute": (s["compute_infer"]["count"], compute),
            "encode": (w.get("encode", {}).get("count", 0), w.get("encode", {}).get("ns", 0)),
        }

    a, b = totals(before), totals(after)
    out: dict[str, float] = {}
    for part in _PARTS:
        count = b[part][0] - a[part][0]
        out[f"{part}_us"] = round((b[part][1] - a[part][1]) / count / 1e3, 2) if count else 0.0
    return out


async def _stats(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(url) as r:
        return orjson.loads(await r.read())


async def _measure(
    targets: dict[str, str], concurrencies: list[int], warmup_s: float, duration_s: float, rounds: int
) -> list[dict[str, Any]]:
    samples: dict[tuple[str, int], list[dict[str, Any]]] = {}
    connector = aiohttp.TCPConnector(limit=max(concurrencies) + 4)
    async with aiohttp.ClientSession(connector=connector) as session, grpc.aio.insecure_channel(targets["grpc"]) as channel:
        calls: dict[str, Call] = {
            "baseline_fastapi_ort_json": _http_call(session, targets["baseline"], JSON_BODY, {"Content-Type": "application/json"}, False),
            "servelab_rest_json": _http_call(session, targets["rest"], JSON_BODY, {"Content-Type": "application/json"}, False),
            "servelab_rest_binary": _http_call(session, targets["rest"], BINARY_BODY, BINARY_HEADERS, True),
            "servelab_grpc": _grpc_call(channel),
        }
        for rnd in range(rounds):
            for c in concurrencies:
                for name in TARGETS:
                    before = await _stats(session, targets["stats"]) if name.startswith("servelab") else None
                    row = {"target": name, "round": rnd, **await _closed_loop(calls[name], c, warmup_s, duration_s)}
                    if before is not None:
                        row.update(_server_split(before, await _stats(session, targets["stats"])))
                    print(json.dumps(row), flush=True)
                    samples.setdefault((name, c), []).append(row)
    # the median round by throughput, per target and concurrency
    rows = []
    for (_, _), runs in samples.items():
        runs.sort(key=lambda r: r["requests_per_s"])
        rows.append({**runs[len(runs) // 2], "rounds_rps": [r["requests_per_s"] for r in runs]})
    return rows


def _print_table(rows: list[dict[str, Any]], ratios: dict[str, dict[str, float]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Batch-1 `simple`: servelab vs FastAPI + onnxruntime (median of rounds)")
    for col in ("target", "c", "req/s", "x baseline", "P50 ms", "P99 ms", "decode us", "queue us", "compute us", "encode us"):
        table.add_column(col, justify="right")
    for r in sorted(rows, key=lambda r: (TARGETS.index(r["target"]), r["concurrency"])):
        ratio = ratios.get(r["target"], {}).get(str(r["concurrency"]))
        table.add_row(
            r["target"], str(r["concurrency"]), f"{r['requests_per_s']:.0f}", f"{ratio:.2f}" if ratio else "1.00",
            f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}",
            *(f"{r[f'{p}_us']:.1f}" if f"{p}_us" in r else "-" for p in _PARTS),
        )
    Console(width=160).print(table)


def _ratios(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    base = {r["concurrency"]: r["requests_per_s"] for r in rows if r["target"].startswith("baseline")}
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        if not r["target"].startswith("baseline") and base.get(r["concurrency"]):
            out.setdefault(r["target"], {})[str(r["concurrency"])] = round(r["requests_per_s"] / base[r["concurrency"]], 3)
    return out


def _bar(doc: dict[str, Any]) -> str:
    """Issue 3's bar: REST binary >= 0.9x the baseline's req/s at every concurrency, P99 at the top one no worse."""
    rows = {(r["target"], r["concurrency"]): r for r in doc["results"]}
    ratios = doc["ratio_to_baseline_rps"].get("servelab_rest_binary", {})
    levels = sorted(c for t, c in rows if t == "servelab_rest_binary")
    if not levels or len(ratios) < len(levels):
        return "Bar (issue 3): not measured (no REST binary or baseline rows)."
    top = levels[-1]
    mine, base = rows[("servelab_rest_binary", top)]["p99_ms"], rows[("baseline_fastapi_ort_json", top)]["p99_ms"]
    ok = all(ratios[str(c)] >= 0.9 for c in levels) and mine <= base
    shown = ", ".join(f"c={c} {ratios[str(c)]:.2f}x" for c in levels)
    return (
        f"Bar (issue 3): REST binary >= 0.9x the baseline's throughput at every concurrency, P99 at c={top} no "
        f"worse. Measured: {shown}; P99 at c={top} {mine:.1f} ms vs {base:.1f} ms. {'PASS' if ok else 'FAIL'}."
    )


def results_markdown(doc: dict[str, Any]) -> str:
    """This run's section of RESULTS.md, from the document written to JSON."""
    from servelab.bench.results_md import markdown_table

    ratios = doc["ratio_to_baseline_rps"]
    columns = ("target", "c", "req/s", "x baseline", "P50 ms", "P99 ms", "decode us", "queue us", "compute us",
               "encode us")  # fmt: skip
    rows = []
    for r in sorted(doc["results"], key=lambda r: (TARGETS.index(r["target"]), r["concurrency"])):
        ratio = ratios.get(r["target"], {}).get(str(r["concurrency"]))
        rows.append((
            r["target"], r["concurrency"], f"{r['requests_per_s']:.0f}", f"{ratio:.2f}" if ratio else "1.00",
            f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}",
            *(f"{r[f'{p}_us']:.1f}" if f"{p}_us" in r else "-" for p in _PARTS),
        ))  # fmt: skip
    head = f"{doc['rounds']} interleaved rounds of {doc['duration_s']:g} s, the median round by req/s.\n\n"
    return head + markdown_table(columns, rows) + "\n" + _bar(doc) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration-s", type=float, default=3.0)
    parser.add_argument("--warmup-s", type=float, default=0.5)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULT)
    add_results_md_options(parser, SECTION, RESULTS_MD)
    args = parser.parse_args()
    env = {"OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as servers:
        repo = simple_repository(Path(tmp) / "repo")
        servelab = servers.enter_context(
            servelab_serve(repo, "--log-level", "warning", env=env, log=Path(tmp) / "servelab.log", ready_timeout_s=90))
        [base] = free_ports(1)
        baseline_argv = [sys.executable, "-m", "servelab.bench.peers.fastapi_ort", "--model",
                         str(repo / "simple" / "1" / "model.onnx"), "--name", "simple", "--port", str(base),
                         "--intra-op-threads", "1"]  # fmt: skip
        servers.enter_context(running(baseline_argv, f"http://127.0.0.1:{base}/v2/health/ready", env=env,
                                      log=Path(tmp) / "baseline.log", ready_timeout_s=90))
        assert servelab.ports is not None
        http = servelab.ports.http_url
        targets = {
            "rest": f"{http}/v2/models/simple/infer",
            "grpc": servelab.ports.grpc_address,
            "baseline": f"http://127.0.0.1:{base}/v2/models/simple/infer",
            "stats": f"{http}/v2/models/simple/stats",
        }
        rows = asyncio.run(_measure(targets, args.concurrency, args.warmup_s, args.duration_s, args.rounds))
    result = {
        "benchmark": "serving_overhead",
        "model": "simple (ONNX INT32 [1,16] add/sub), batch 1",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "duration_s": args.duration_s,
        "results": rows,
        "rounds": args.rounds,
        "ratio_to_baseline_rps": _ratios(rows),
    }
    _print_table(rows, result["ratio_to_baseline_rps"])
    write_results(result, args.out, args.results_md, SECTION, results_markdown)


if __name__ == "__main__":
    exit_on_sigterm()  # a SIGTERM (a timeout) still stops the servers this script started
    main()
