"""Ray overhead: one model through Ray Serve (1 and 2 replicas) and through `servelab serve`, same run.

    python benchmarks/ray_overhead.py [--concurrency 1 16] [--rounds 3] [--interval-ms 2000]

Triton's ``simple`` (ONNX, INT32 [1, 16] add/sub) is served three ways from one repository: by a
`servelab serve` process, and by `servelab deploy ray` on a local Ray as ``simple`` (1 replica) and as
``simple_r2`` (the same model folder under another name, 2 replicas), so that all three targets stay up
and are measured in alternating rounds (each round visits every target at every concurrency; the
median round is kept) with servelab's own load generator (OIP REST, binary tensors, closed loop). Prints
a table, writes benchmarks/results/ray_overhead.json and the ``ray_overhead`` section of
benchmarks/RESULTS.md. Needs the ray and bench extras. Figures are only meaningful on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

import ray
from _examples import simple_repository

from servelab.bench import InputSpec, LoadSpec, TargetSpec, run_sweep
from servelab.bench.net import free_ports
from servelab.bench.results_md import add_results_md_options, write_results
from servelab.bench.serverproc import servelab_serve
from servelab.config.settings import ServerSettings
from servelab.config.signals import exit_on_sigterm
from servelab.deploy import ray_deploy

HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "ray_overhead.json"
RESULTS_MD = HERE / "RESULTS.md"
SECTION = "ray_overhead"


def _build_repo(root: Path) -> Path:
    repo = simple_repository(root / "repo")
    shutil.copytree(repo / "simple", repo / "simple_r2")
    config = repo / "simple_r2" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "simple"', 'name: "simple_r2"'))
    return repo


def _measure(url: str, model: str, concurrency: int, args: argparse.Namespace) -> dict[str, Any]:
    load = LoadSpec(levels=(concurrency,), measurement_interval_ms=args.interval_ms, max_windows=args.max_windows,
                    warmup_requests=args.warmup_requests)
    sweep = run_sweep(TargetSpec("oip-http", url), model, load, InputSpec(), measure_ceiling=False)
    level = sweep.levels[0]
    latency = level.summary.percentiles_ms()
    return {"throughput_rps": level.throughput_rps, "p50_ms": latency["p50"], "p99_ms": latency["p99"],
            "errors": sum(level.errors.values()), "stable": level.stable}


def _median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose throughput is the median (its P50/P99 go with it)."""
    ordered = sorted(rounds, key=lambda r: r["throughput_rps"])
    return {**ordered[len(ordered) // 2], "rounds_rps": [round(r["throughput_rps"], 1) for r in rounds]}


def _table(rows: list[dict[str, Any]]) -> str:
    lines = ["| target | concurrency | req/s | P50 ms | P99 ms | req/s vs serve | P99 vs serve |", "|---|---|---|---|---|---|---|"]
    base = {r["concurrency"]: r for r in rows if r["target"] == "servelab serve"}
    for r in rows:
        b = base[r["concurrency"]]
        lines.append(
            f"| {r['target']} | {r['concurrency']} | {r['throughput_rps']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} "
            f"| {r['throughput_rps'] / b['throughput_rps']:.2f}x | {r['p99_ms'] / b['p99_ms']:.2f}x |"
        )
    return "\n".join(lines)


def _note(rows: list[dict[str, Any]]) -> str:
    by = {(r["target"], r["concurrency"]): r for r in rows}
    c1 = min(r["concurrency"] for r in rows)
    extra_ms = by[("ray serve, 1 replica", c1)]["p50_ms"] - by[("servelab serve", c1)]["p50_ms"]
    return (
        f"Where Ray's cost goes: at concurrency {c1} a request through Ray Serve takes {extra_ms:+.2f} ms more at P50. "
        "Through `servelab serve` a request is parsed once by uvicorn and answered by the data plane in the same "
        "process. Through Ray it is parsed by Ray Serve's HTTP proxy (its own process and event loop), routed "
        "(replica choice by power of two choices on queue length), sent to the replica as an actor call (the ASGI "
        "messages serialised, one more socket hop, Ray's task bookkeeping on both sides), and only then reaches the "
        "same servelab REST app and data plane; the answer goes back the same way. The model's own time (queue + "
        "compute) is the same in both. Replicas: on one machine a second replica adds a process that competes for "
        "the same cores as the proxy, the first replica and the load generator, so it only pays when one replica's "
        "process is the bottleneck (a model slower than the proxy's per-request cost); across machines each replica "
        "brings its own cores and throughput grows with them until the proxies (one per node) saturate."
    )


def results_markdown(doc: dict[str, Any]) -> str:
    """This script's section of RESULTS.md, from the JSON it wrote."""
    rows, meta = doc["rows"], doc["meta"]
    return (
        f"`simple` (ONNX, INT32 [1, 16]), batch 1, OIP REST binary, closed loop, servelab's load generator; "
        f"median of {meta['rounds']} alternating rounds; {meta['cpus']} cores, {meta['platform']}.\n\n"
        + _table(rows) + "\n\n" + _note(rows) + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval-ms", type=int, default=2000, help="measurement window")
    parser.add_argument("--max-windows", type=int, default=6)
    parser.add_argument("--warmup-requests", type=int, default=50)
    add_results_md_options(parser, SECTION, RESULTS_MD)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="ray-overhead-"))
    repo = _build_repo(tmp)
    serve_port, ray_port = free_ports(2)
    settings = ServerSettings(
        model_repository=[repo], http_port=ray_port, deploy={"models": {"simple_r2": {"num_replicas": 2}}}
    )
    targets = {
        "servelab serve": (f"http://127.0.0.1:{serve_port}", "simple"),
        "ray serve, 1 replica": (f"http://127.0.0.1:{ray_port}", "simple"),
        "ray serve, 2 replicas": (f"http://127.0.0.1:{ray_port}", "simple_r2"),
    }
    raw: dict[tuple[str, int], list[dict[str, Any]]] = {}
    with servelab_serve(repo, http_port=serve_port, env={"OMP_NUM_THREADS": "1"}, log=tmp / "serve.log"):
        ray.init(address="local", num_cpus=8, include_dashboard=False, configure_logging=False, log_to_driver=False,
                 _temp_dir=str(tmp / "ray"))
        try:
            ray_deploy.deploy(settings)
            for round_index in range(args.rounds):
                for concurrency in args.concurrency:
                    for name, (url, model) in targets.items():
                        result = _measure(url, model, concurrency, args)
                        raw.setdefault((name, concurrency), []).append(result)
                        print(f"round {round_index + 1} {name:22s} c={concurrency:<3d} "
                              f"{result['throughput_rps']:9.0f} req/s P99 {result['p99_ms']:.2f} ms", flush=True)
        finally:
            ray_deploy.shutdown()
            ray.shutdown()
    rows = [{"target": t, "concurrency": c, **_median_round(r)} for (t, c), r in sorted(raw.items(), key=lambda kv: (kv[0][1], list(targets).index(kv[0][0])))]
    meta = {"rounds": args.rounds, "cpus": os.cpu_count(), "platform": platform.platform(), "ray": ray.__version__,
            "interval_ms": args.interval_ms, "concurrency": args.concurrency}
    print(_table(rows))
    doc = {"meta": meta, "rows": rows, "p50_ms_spread": {
        f"{t} c={c}": statistics.pstdev([x["p50_ms"] for x in r]) for (t, c), r in raw.items()}}
    write_results(doc, RESULT, args.results_md, SECTION, results_markdown)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    exit_on_sigterm()  # a SIGTERM (a timeout) still stops the servers this script started
    main()
