"""Dynamic batching over gRPC: throughput with and without batching, the in-process batch ceiling,
and the latency the queue delay costs. Not collected by pytest.

    .venv/bin/python benchmarks/batching.py [--duration 6] [--concurrency 64] [--delay-us 2000]

A deep, narrow MLP (ONNX, built here: 500 x MatMul(128x128)+ReLU; on this CPU about 2 ms at batch 1
and about 5 ms at batch 32, since per-layer dispatch, not arithmetic, dominates; ``--shape wide`` gives a
512-2048-2048-512 MLP instead) runs in a `servelab serve` subprocess as three models: ``plain`` (no
batching), ``batched`` (dynamic_batching, 1 instance x all cores) and ``batched_x2`` (2 instances x
cores/2, the instance-count comparison). Batch-1 requests come from a grpc.aio load client in a
separate process (raw OIP stubs, raw tensor contents), ``--concurrency`` in flight, for
``--duration`` seconds each. Ratios are measured in the same run. Writes benchmarks/results/batching.json.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from servelab.bench.net import free_ports
from servelab.config.grpc_runtime import CLIENT_EXPERIMENTS, disable_grpc_experiments
from servelab.config.signals import exit_on_sigterm

disable_grpc_experiments(CLIENT_EXPERIMENTS)  # before grpc is imported: the gRPC client as servelab's own

RESULTS = Path(__file__).resolve().parent / "results" / "batching.json"
RESULTS_MD = Path(__file__).resolve().parent / "RESULTS.md"
SECTION = "batching"  # the section of RESULTS_MD this script writes
SPEEDUP_BAR = 3.0
SHAPES = {"deep": (128,) * 501, "wide": (512, 2048, 2048, 512)}
DIMS = SHAPES["deep"]
MAX_BATCH = 32


# ----- model and repository -----
def build_model(path: Path, dims: tuple[int, ...] = DIMS) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i, (a, b) in enumerate(itertools.pairwise(dims)):
        inits.append(numpy_helper.from_array((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), f"W{i}"))
        last = i == len(dims) - 2
        nodes.append(helper.make_node("MatMul", [prev, f"W{i}"], ["y" if last else f"h{i}"]))
        if not last:
            nodes.append(helper.make_node("Relu", [f"h{i}"], [f"r{i}"]))
            prev = f"r{i}"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", dims[0]])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", dims[-1]])
    model = helper.make_model(helper.make_graph(nodes, "wide_mlp", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def build_repo(root: Path, delay_us: int) -> Path:
    model = root / "wide.onnx"
    build_model(model, DIMS)
    head = (f'backend: "onnxruntime"\nmax_batch_size: {MAX_BATCH}\n'
            f'input [{{ name: "x" data_type: TYPE_FP32 dims: [{DIMS[0]}] }}]\n'
            f'output [{{ name: "y" data_type: TYPE_FP32 dims: [{DIMS[-1]}] }}]\n')
    batching = f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}\n"
    models = {
        "plain": "",
        "batched": batching,
        "batched_x2": batching + "instance_group [{ count: 2 kind: KIND_CPU }]\n",
    }
    for name, extra in models.items():
        (root / "repo" / name / "1").mkdir(parents=True)
        # a hard link, not a symlink: the server refuses a model file that resolves outside its model's folder
        os.link(model, root / "repo" / name / "1" / "model.onnx")
        (root / "repo" / name / "config.pbtxt").write_text(f'name: "{name}"\n' + head + extra)
    return root / "repo"


def in_process(model: Path, seconds: float = 3.0) -> dict[str, float]:
    """The runtime alone (ORT, every core): batch-1 and batch-32 latency, batch-32 rows/s ceiling."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count() or 1
    session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    out: dict[str, float] = {}
    for batch in (1, MAX_BATCH):
        x = np.random.default_rng(1).standard_normal((batch, DIMS[0])).astype(np.float32)
        for _ in range(5):
            session.run(None, {"x": x})
        times: list[float] = []
        end = time.perf_counter() + seconds / 2
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            session.run(None, {"x": x})
            times.append(time.perf_counter() - t0)
        out[f"batch{batch}_median_ms"] = float(np.median(times) * 1e3)
        out[f"batch{batch}_rows_per_s"] = batch / float(np.median(times))
    return out


# ----- server -----


def start_server(repo: Path, log: Path) -> tuple[subprocess.Popen[bytes], dict[str, int]]:
    import httpx

    http, grpc_port, metrics, mgmt = free_ports(4)
    cmd = [sys.executable, "-m", "servelab.cli", "serve", str(repo), "--host", "127.0.0.1",
           "--http-port", str(http), "--grpc-port", str(grpc_port), "--metrics-port", str(metrics),
           "--management-port", str(mgmt), "--log-level", "warning"]
    with log.open("wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{http}/v2/health/ready", timeout=1).status_code == 200:
                return proc, {"http": http, "grpc": grpc_port, "metrics": metrics}
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server not ready in 120 s: {log.read_text()[-2000:]}")


def batch_sizes(metrics_port: int) -> dict[str, dict[str, float]]:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in ("nv_inference_count", "nv_inference_exec_count"):
                out.setdefault(s.labels["model"], {})[s.name] = s.value
    return out


# ----- load client (separate process) -----
async def _load(address: str, model: str, concurrency: int, duration: float) -> dict[str, Any]:
    import grpc

    from servelab.protocol import grpc_service_pb2 as pb
    from servelab.protocol import grpc_service_pb2_grpc as pbg

    x = np.random.default_rng(2).standard_normal((1, DIMS[0])).astype(np.float32)
    request = pb.ModelInferRequest(model_name=model, raw_input_contents=[x.tobytes()])
    request.inputs.add(name="x", datatype="FP32", shape=[1, DIMS[0]])
    latencies: list[float] = []
    errors = 0
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pbg.GRPCInferenceServiceStub(channel)
        for _ in range(20):  # warm-up
            await stub.ModelInfer(request)
        end = time.perf_counter() + duration

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                try:
                    await stub.ModelInfer(request)
                except grpc.aio.AioRpcError:
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
    lat = np.array(latencies) * 1e3
    return {
        "model": model, "concurrency": concurrency, "requests": len(latencies), "errors": errors,
        "throughput_rps": len(latencies) / elapsed,
        "p50_ms": float(np.percentile(lat, 50)), "p90_ms": float(np.percentile(lat, 90)),
        "p99_ms": float(np.percentile(lat, 99)),
    }


def run_client(address: str, model: str, concurrency: int, duration: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--client", address, "--model", model,
           "--concurrency", str(concurrency), "--duration", str(duration),
           "--shape", next(k for k, v in SHAPES.items() if v == DIMS)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def results_markdown(doc: dict[str, Any]) -> str:
    """This run's section of RESULTS.md, from the document written to JSON."""
    from servelab.bench.results_md import markdown_table

    m, ceiling, low = doc["model"], doc["in_process"], doc["low_load_concurrency_1"]
    delay_ms = m["max_queue_delay_us"] / 1e3
    head = (
        f"Model: {m['layers']} x MatMul ({m['width']} wide) + ReLU, ONNX (`--shape {m['shape']}`); in-process "
        f"{ceiling['batch1_median_ms']:.2f} ms at batch 1 and {ceiling['batch32_median_ms']:.2f} ms at batch "
        f"{m['max_batch_size']}. Batch-1 gRPC requests at concurrency {doc['concurrency']}, {doc['duration_s']:g} s "
        f"each, max_batch_size {m['max_batch_size']}, max_queue_delay {delay_ms:g} ms, one run.\n\n"
    )
    columns = ("model", "req/s", "P50 ms", "P99 ms", "average executed batch")
    rows = [
        (name, f"{r['throughput_rps']:.0f}", f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}",
         f"{doc['average_executed_batch'].get(name, math.nan):.1f}")
        for name, r in doc["runs"].items()
    ]  # fmt: skip
    speedup = doc["speedup_batched_vs_plain"]
    verdict = "PASS" if speedup >= SPEEDUP_BAR else "FAIL"
    ceiling_rows = ceiling[f"batch{m['max_batch_size']}_rows_per_s"]
    bullets = [
        f"Throughput with dynamic batching / without: **{speedup:.2f}x** (bar: >= {SPEEDUP_BAR:g}x). {verdict}.",
        f"Fraction of the in-process batch-{m['max_batch_size']} ceiling ({ceiling_rows:.0f} rows/s) reached: "
        f"{doc['fraction_of_in_process_batch32_ceiling']:.0%}.",
        f"P99 cost of the {delay_ms:g} ms queue delay at concurrency 1: {doc['queue_delay_p99_cost_ms']:+.1f} ms "
        f"(P50 {doc['queue_delay_p50_cost_ms']:+.1f} ms; `plain` {low['plain']['p50_ms']:.2f} ms, `batched` "
        f"{low['batched']['p50_ms']:.2f} ms P50).",
        f"`batched_x2` (2 instances, threads split) / `batched` (1 instance, all {doc['host']['cpus']} cores): "
        f"{doc['instances_2x1_vs_1x2_throughput']:.2f}x throughput.",
    ]
    return head + markdown_table(columns, rows) + "\n" + "".join(f"- {b}\n" for b in bullets)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=6.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--delay-us", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--results-md", type=Path, default=RESULTS_MD, help=f"rewrite its section {SECTION!r}")
    ap.add_argument("--no-results-md", dest="results_md", action="store_const", const=None)
    ap.add_argument("--client")
    ap.add_argument("--model", default="batched")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="deep")
    args = ap.parse_args()
    global DIMS
    DIMS = SHAPES[args.shape]
    if args.client:
        print(json.dumps(asyncio.run(_load(args.client, args.model, args.concurrency, args.duration))))
        return

    with tempfile.TemporaryDirectory() as tmp:
        repo = build_repo(Path(tmp), args.delay_us)
        ceiling = in_process(Path(tmp) / "wide.onnx")
        print("in-process:", json.dumps(ceiling), flush=True)
        proc, ports = start_server(repo, Path(tmp) / "server.log")
        address = f"127.0.0.1:{ports['grpc']}"
        try:
            runs = {}
            for model in ("plain", "batched", "batched_x2"):
                runs[model] = run_client(address, model, args.concurrency, args.duration)
                print(model, json.dumps(runs[model]), flush=True)
            low = {m: run_client(address, m, 1, args.duration / 2) for m in ("plain", "batched")}
            print("concurrency 1:", json.dumps(low), flush=True)
            counts = batch_sizes(ports["metrics"])
        finally:
            proc.terminate()
            proc.wait(timeout=60)

    avg_batch = {m: c["nv_inference_count"] / max(1.0, c["nv_inference_exec_count"]) for m, c in counts.items()}
    result = {
        "benchmark": "dynamic batching over gRPC",
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version()},
        "model": {"shape": args.shape, "layers": len(DIMS) - 1, "width": DIMS[1], "max_batch_size": MAX_BATCH, "max_queue_delay_us": args.delay_us},
        "concurrency": args.concurrency, "duration_s": args.duration,
        "in_process": ceiling,
        "runs": runs,
        "average_executed_batch": avg_batch,
        "speedup_batched_vs_plain": runs["batched"]["throughput_rps"] / runs["plain"]["throughput_rps"],
        "fraction_of_in_process_batch32_ceiling": runs["batched"]["throughput_rps"] / ceiling[f"batch{MAX_BATCH}_rows_per_s"],
        "instances_2x1_vs_1x2_throughput": runs["batched_x2"]["throughput_rps"] / runs["batched"]["throughput_rps"],
        "low_load_concurrency_1": low,
        "queue_delay_p99_cost_ms": low["batched"]["p99_ms"] - low["plain"]["p99_ms"],
        "queue_delay_p50_cost_ms": low["batched"]["p50_ms"] - low["plain"]["p50_ms"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(results_markdown(result))
    if args.results_md is not None:
        from servelab.bench.results_md import write_section

        write_section(args.results_md, SECTION, results_markdown(result))
        print(f"wrote section {SECTION!r} of {args.results_md}")


if __name__ == "__main__":
    exit_on_sigterm()  # a SIGTERM (a timeout) still stops the servers this script started
    main()
