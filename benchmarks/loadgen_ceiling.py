"""The load generator's own ceiling: requests/s against the bench's null endpoint (which answers at
once), at concurrency 1/8/64, one process against several worker processes, HTTP and gRPC.

Ratios are against the single-process figure at the same concurrency, measured in the same run.
Writes benchmarks/results/loadgen_ceiling.json. Run: .venv/bin/python benchmarks/loadgen_ceiling.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from servelab.bench import LoadSpec, TargetSpec, measure_level
from servelab.bench.nullserver import NullServer
from servelab.bench.results_md import add_results_md_options, write_results
from servelab.config.grpc_runtime import CLIENT_EXPERIMENTS, disable_grpc_experiments
from servelab.config.signals import exit_on_sigterm

disable_grpc_experiments(CLIENT_EXPERIMENTS)  # before grpc is imported: the gRPC client as servelab's own

RESULTS = Path(__file__).parent / "results" / "loadgen_ceiling.json"
RESULTS_MD = Path(__file__).parent / "RESULTS.md"
SECTION = "loadgen_ceiling"  # the section of RESULTS_MD this script writes


def _measure(
    url: str, kind: str, concurrency: int, workers: int, interval_ms: int
) -> dict[str, float | bool]:
    load = LoadSpec(
        levels=(concurrency,), measurement_interval_ms=interval_ms, max_windows=6, stability_percentage=10,
        warmup_requests=100, workers=workers, max_level_s=30,
    )  # fmt: skip
    requests = [{"INPUT0": np.ones((1, 16), dtype=np.float32)}]
    result = asyncio.run(measure_level(TargetSpec(kind, url), "null", requests, load, concurrency))  # type: ignore[arg-type]
    return {
        "throughput_rps": result.throughput_rps,
        "p50_ms": result.summary.histogram.percentile(50) * 1e3,
        "p99_ms": result.summary.histogram.percentile(99) * 1e3,
        "stable": result.stable,
        "errors": sum(result.errors.values()),
    }


def results_markdown(doc: dict[str, Any]) -> str:
    """This run's section of RESULTS.md, from the document written to JSON."""
    from servelab.bench.results_md import markdown_table

    n = doc["workers"]
    columns = ("protocol", "concurrency", "1 process req/s", f"{n} processes req/s", "1 process P50 ms")
    rows = [
        (r["protocol"], r["concurrency"], f"{r['single']['throughput_rps']:,.0f}",
         f"{r['multi']['throughput_rps']:,.0f}", f"{r['single']['p50_ms']:.3f}")
        for r in doc["rows"]
    ]  # fmt: skip
    tops = []
    for protocol in dict.fromkeys(r["protocol"] for r in doc["rows"]):
        mine = [r for r in doc["rows"] if r["protocol"] == protocol]
        single = max(r["single"]["throughput_rps"] for r in mine)
        multi = max(r["multi"]["throughput_rps"] for r in mine)
        tops.append(f"{protocol} {single:,.0f} req/s in one process, {multi:,.0f} in {n}")
    return markdown_table(columns, rows) + "\nHighest rates: " + "; ".join(tops) + ".\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=2, help="worker processes for the multi-process rows")
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--concurrency", default="1,8,64")
    parser.add_argument("--output", type=Path, default=RESULTS)
    add_results_md_options(parser, SECTION, RESULTS_MD)
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    rows = []
    for protocol, kind in (("http", "oip-http"), ("grpc", "oip-grpc")):
        with NullServer(protocol) as null:
            for c in levels:
                single = _measure(null.url, kind, c, 1, args.interval_ms)
                multi = _measure(null.url, kind, c, args.workers, args.interval_ms)
                ratio = (
                    multi["throughput_rps"] / single["throughput_rps"]
                    if single["throughput_rps"]
                    else float("nan")
                )
                rows.append(
                    {
                        "protocol": protocol,
                        "concurrency": c,
                        "single": single,
                        "multi": multi,
                        "multi_over_single": ratio,
                    }
                )
    table = Table(title=f"load generator ceiling vs null endpoint ({os.cpu_count()} CPUs)")
    for col in (
        "protocol",
        "concurrency",
        "1 proc req/s",
        f"{args.workers} procs req/s",
        "ratio",
        "1 proc p50 ms",
        "stable",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        s, m = r["single"], r["multi"]
        table.add_row(
            r["protocol"], str(r["concurrency"]), f"{s['throughput_rps']:,.0f}", f"{m['throughput_rps']:,.0f}",
            f"{r['multi_over_single']:.2f}x", f"{s['p50_ms']:.3f}", f"{s['stable']}/{m['stable']}",
        )  # fmt: skip
    Console(width=120).print(table)
    doc = {
        "benchmark": "loadgen_ceiling",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "baseline": "single process at the same concurrency",
        "workers": args.workers,
        "note": "the null server runs in its own process on the same CPUs, so on 2 cores it competes with the workers",
        "rows": rows,
    }
    write_results(doc, args.output, args.results_md, SECTION, results_markdown)


if __name__ == "__main__":
    exit_on_sigterm()  # a SIGTERM (a timeout) still stops the servers this script started
    main()
