"""Benchmark: 2-hop neighbour sampling, numba serial / numba parallel vs the pure-Python reference.

    .venv/bin/python benchmarks/graph_sampler.py [--nodes 1000000] [--graph-dir DIR] [--threads 2]

Builds (or reuses) a synthetic power-law graph, times each sampler at batch 1 and 32 on the same
pre-drawn seed batches, and reports P50/P99 microseconds and the speed-up over Python measured in
this run. Writes benchmarks/results/graph_sampler.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numba
import numpy as np
from rich.console import Console
from rich.table import Table

from servelab.config.signals import exit_on_sigterm
from servelab.graph.sampler import NumbaSampler, PythonSampler
from servelab.graph.store import GraphStore
from servelab.graph.synth import synth_graph

RESULTS = Path(__file__).parent / "results" / "graph_sampler.json"
RESULTS_MD = Path(__file__).parent / "RESULTS.md"
SECTION = "graph_sampler"  # the section of RESULTS_MD this script writes
SPEEDUP_BAR = 20.0  # numba over the Python reference at the largest batch


def _graph(args: argparse.Namespace, console: Console) -> GraphStore:
    if args.graph_dir and (Path(args.graph_dir) / "manifest.json").is_file():
        return GraphStore.open(args.graph_dir)
    out = args.graph_dir or tempfile.mkdtemp(prefix="servelab-sampler-bench-")
    t0 = time.perf_counter()
    store = synth_graph(out, nodes=args.nodes, avg_degree=args.avg_degree, features=8, classes=16, seed=0)
    console.print(
        f"synthesised {store.num_nodes:,} nodes / {store.num_edges:,} edges in {time.perf_counter() - t0:.1f} s"
    )
    return store


def _time(sample: object, batches: list[np.ndarray], max_s: float) -> dict[str, float]:
    """Time sample(batch) over batches (bounded by max_s); return latency stats in microseconds."""
    fn = sample  # a bound method
    for b in batches[: min(50, len(batches))]:
        fn(b)  # type: ignore[operator]
    lat: list[int] = []
    hop1: list[int] = []
    hop2: list[int] = []
    deadline = time.perf_counter() + max_s
    for b in batches:
        t0 = time.perf_counter_ns()
        blocks = fn(b)  # type: ignore[operator]
        lat.append(time.perf_counter_ns() - t0)
        hop1.append(blocks.num_hop1 - blocks.num_seeds)
        hop2.append(blocks.num_nodes - blocks.num_hop1)
        if time.perf_counter() > deadline:
            break
    us = np.array(lat) / 1000.0
    per = len(batches[0])
    return {
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "mean_us": float(us.mean()),
        "iters": len(us),
        "hop1_per_query": float(np.mean(hop1)) / per,
        "hop2_per_query": float(np.mean(hop2)) / per,
    }


def results_markdown(doc: dict[str, Any]) -> str:
    """This run's section of RESULTS.md, from the document written to JSON."""
    from servelab.bench.results_md import markdown_table

    g, rows = doc["graph"], doc["results"]
    head = (
        f"Graph `{g['path']}`: {g['nodes']:,} nodes, {g['edges']:,} edges, fan-outs {doc['fanouts']}; "
        f"{doc['env']['numba_threads']} numba threads for the parallel sampler.\n\n"
    )
    columns = ("sampler", "batch", "P50 us", "P99 us", "x python (P50)")
    table = markdown_table(columns, [
        (r["sampler"], r["batch"], f"{r['p50_us']:.1f}", f"{r['p99_us']:.1f}", f"{r['speedup_p50_vs_python']:.1f}")
        for r in rows
    ])  # fmt: skip
    top = max(r["batch"] for r in rows)
    numba = {r["sampler"]: r["speedup_p50_vs_python"] for r in rows if r["batch"] == top and r["sampler"] != "python"}
    met = bool(numba) and min(numba.values()) >= SPEEDUP_BAR
    shown = ", ".join(f"{x:.0f}x {name.removeprefix('numba ')}" for name, x in numba.items())
    bar = f"\nBar: numba >= {SPEEDUP_BAR:g}x the Python reference at batch {top}: **{shown}, {'met' if met else 'NOT met'}.**\n"
    return head + table + bar


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--avg-degree", type=float, default=15)
    ap.add_argument("--graph-dir", default=None, help="reuse / keep the synthetic graph here")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--iters", type=int, default=3000, help="timed calls per cell (at most)")
    ap.add_argument("--max-seconds", type=float, default=6.0, help="time limit per cell")
    ap.add_argument("--threads", type=int, default=None, help="numba threads for the parallel sampler")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--results-md", type=Path, default=RESULTS_MD, help=f"rewrite its section {SECTION!r}")
    ap.add_argument("--no-results-md", dest="results_md", action="store_const", const=None)
    args = ap.parse_args()
    console = Console(width=max(Console().width, 110))
    store = _graph(args, console)
    rng = np.random.default_rng(1)
    samplers = {
        "python": PythonSampler(store, seed=0),
        "numba serial": NumbaSampler(store, seed=0, mode="serial"),
        "numba parallel": NumbaSampler(store, seed=0, mode="parallel", threads=args.threads),
    }
    t0 = time.perf_counter()
    samplers["numba serial"].warmup()  # type: ignore[union-attr]
    console.print(f"numba kernels ready in {time.perf_counter() - t0:.2f} s (compile or cache load)")
    rows: list[dict[str, object]] = []
    for bsz in args.batches:
        batches = [rng.integers(0, store.num_nodes, bsz) for _ in range(args.iters)]
        base = None
        for name, s in samplers.items():
            stats = _time(s.sample, batches, args.max_seconds)
            base = base or stats
            stats["speedup_p50_vs_python"] = base["p50_us"] / stats["p50_us"]
            rows.append({"sampler": name, "batch": bsz, **stats})
    table = Table(
        title=f"2-hop sampling, fan-outs [10, 10], {store.num_nodes:,} nodes, {store.num_edges:,} edges"
    )
    for col in (
        "sampler",
        "batch",
        "P50 us",
        "P99 us",
        "mean us",
        "x python (P50)",
        "hop-1/q",
        "hop-2/q",
        "iters",
    ):
        table.add_column(col, justify="left" if col == "sampler" else "right")
    for r in rows:
        table.add_row(
            str(r["sampler"]), str(r["batch"]), f"{r['p50_us']:.1f}", f"{r['p99_us']:.1f}", f"{r['mean_us']:.1f}",
            f"{r['speedup_p50_vs_python']:.1f}", f"{r['hop1_per_query']:.1f}", f"{r['hop2_per_query']:.1f}",
            str(r["iters"]),
        )  # fmt: skip
    console.print(table)
    env = {
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "numba": numba.__version__,
        "numpy": np.__version__,
        "numba_threads": numba.get_num_threads(),
        "threading_layer": numba.threading_layer(),
    }
    graph = {"nodes": store.num_nodes, "edges": store.num_edges, "path": Path(store.path).name}  # the folder's name: no machine path in results
    doc = {"graph": graph, "env": env, "fanouts": [10, 10], "results": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2))
    console.print(f"wrote {args.out}")
    if args.results_md is not None:
        from servelab.bench.results_md import write_section

        write_section(args.results_md, SECTION, results_markdown(doc))
        console.print(f"wrote section {SECTION!r} of {args.results_md}")


if __name__ == "__main__":
    exit_on_sigterm()  # a SIGTERM (a timeout) still stops the servers this script started
    main()
