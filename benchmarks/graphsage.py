"""GraphSAGE pipeline benchmark: sampling + feature gather + SAGE layers, in-process, per runtime.

Rows (batch 1 and 32 by default, the same query nodes for every row):
  numba + onnxruntime | numba + openvino | numba + torchscript | python + torch eager (baseline)
  | numba fused + onnxruntime (what the ``sage_fused`` model runs: the first layer's mean taken while
  gathering, then the 11-node dense graph of servelab.graph.dense)
The baseline is a TorchServe-style handler: a pure-Python sampler and eager torch in one function.
Reports P50/P99 latency per call, query nodes per second, each stage's share, and speed-ups against
the baseline measured in the same run. Writes benchmarks/results/graphsage.json.

With ``--e2e`` (or ``--e2e-only``) the same queries also go over the wire (benchmarks/graphsage_e2e.py):
`servelab serve` per layers runtime over gRPC and REST binary, and a TorchServe-style FastAPI handler
(Python sampler + torch eager, JSON), in the published layout: batch 1 P50/P99, batch 32 P50/P99,
nodes/s with batch-32 requests under concurrency, and ratios to the baseline.

    .venv/bin/python benchmarks/graphsage.py --nodes 100000      # while developing
    .venv/bin/python benchmarks/graphsage.py                     # 1,000,000 nodes (~0.5 GB features)
    .venv/bin/python benchmarks/graphsage.py --e2e-only --graph-dir G --model-dir M
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from graphsage_e2e import BASELINE_E2E, E2ERow, Load, run_e2e
from graphsage_timing import PipelineFn, Row, measure, pipeline
from rich.console import Console
from rich.table import Table

from servelab.config.signals import exit_on_sigterm
from servelab.graph.export import export_artifact
from servelab.graph.model import SageConfig, SageLayers, load_model, save_model
from servelab.graph.sampler import NumbaSampler, PythonSampler
from servelab.graph.sessions import LayersFn, eager_runner, load_runner
from servelab.graph.store import GraphStore
from servelab.graph.synth import synth_graph

RESULTS = Path(__file__).parent / "results" / "graphsage.json"
RESULTS_MD = Path(__file__).parent / "RESULTS.md"
SECTION = "graphsage"  # the section of RESULTS_MD this script writes (its in-process rows)
BASELINE = "python + torch eager (baseline)"
FUSED = "numba fused + onnxruntime"
def _fused_pipeline(sampler: NumbaSampler, store: GraphStore, model: SageLayers, path: Path, threads: int) -> PipelineFn:
    from servelab.graph._fused_kernels import dense_inputs
    from servelab.graph.dense import save_dense_onnx
    from servelab.graph.sessions import ort_session

    session = ort_session(save_dense_onnx(model, path), threads)

    def call(ids: np.ndarray) -> tuple[int, int, int]:
        t0 = time.perf_counter_ns()
        block = sampler.sample(ids)
        t1 = time.perf_counter_ns()
        a1, idx2, w2 = dense_inputs(store.features, block.nodes, block.nbr1, block.nbr2, ids.size >= 64)
        t2 = time.perf_counter_ns()
        session.run(["logits", "embeddings"], {"a1": a1, "idx2": idx2, "w2": w2})  # type: ignore[attr-defined]
        return t1 - t0, t2 - t1, time.perf_counter_ns() - t2

    return call


def _graph(nodes: int, graph_dir: Path | None, seed: int, console: Console) -> GraphStore:
    path = graph_dir or Path(tempfile.gettempdir()) / f"servelab-graphsage-{nodes}-s{seed}"
    if (path / "manifest.json").is_file():
        store = GraphStore.open(path)
        if store.num_nodes == nodes:
            return store
    console.print(f"synthesising a {nodes:,}-node graph in {path} ...")
    return synth_graph(path, nodes=nodes, seed=seed)


def _model(store: GraphStore, model_dir: Path | None) -> SageLayers:
    if model_dir is not None:
        return load_model(model_dir)[0]
    torch.manual_seed(0)  # latency does not depend on the weights' values
    return SageLayers(SageConfig(store.num_features, max(store.num_classes, 2))).eval()


def _layer_runners(model: SageLayers, workdir: Path, threads: int) -> dict[str, LayersFn]:
    runners: dict[str, LayersFn] = {}
    for runtime, label in (
        ("onnxruntime", "onnxruntime"),
        ("openvino", "openvino"),
        ("torch", "torchscript"),
    ):
        path = export_artifact(model, runtime, workdir / runtime)
        runners[f"numba + {label}"] = load_runner(runtime, path, threads)
    return runners


def run_in_process(args: argparse.Namespace, console: Console) -> list[Row]:
    """Every in-process configuration at every batch size, baseline included."""
    store = _graph(args.nodes, args.graph_dir, args.seed, console)
    model = _model(store, args.model_dir)
    fanouts = model.config.fanouts
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    queries = rng.choice(store.num_nodes, size=args.queries, replace=False).astype(np.int64)
    numba = NumbaSampler(store, fanouts, args.seed, threads=args.threads)
    numba.warmup()
    with tempfile.TemporaryDirectory() as tmp:
        pipelines = {
            name: pipeline(numba, store, fn)
            for name, fn in _layer_runners(model, Path(tmp), args.threads).items()
        }
        if model.config.aggregator == "mean":
            fused = _fused_pipeline(numba, store, model, Path(tmp) / "dense.onnx", args.threads)
            pipelines[FUSED] = fused
        pipelines[BASELINE] = pipeline(PythonSampler(store, fanouts, args.seed), store, eager_runner(model))
        rows = [
            measure(name, fn, queries, batch, args.min_calls, args.budget_s)
            for batch in args.batch
            for name, fn in pipelines.items()
        ]
    for row in rows:
        base = next(r for r in rows if r.config == BASELINE and r.batch == row.batch)
        row.speedup_p50 = base.p50_us / row.p50_us
        row.throughput_ratio = row.nodes_per_s / base.nodes_per_s
    return rows


def run_end_to_end(args: argparse.Namespace, console: Console) -> list[E2ERow]:
    """The `sage` ensemble behind `servelab serve` per runtime, and the TorchServe-style baseline."""
    store = _graph(args.nodes, args.graph_dir, args.seed, console)
    rng = np.random.default_rng(args.seed)
    queries = rng.choice(store.num_nodes, size=args.queries, replace=False).astype(np.int64)
    load = Load(args.warmup, args.min_calls, args.duration_s, args.concurrency)
    env = dict(item.split("=", 1) for item in args.server_env)
    with tempfile.TemporaryDirectory(prefix="servelab-sage-e2e-") as tmp:
        model_dir = args.model_dir
        if model_dir is None:
            model_dir = save_model(_model(store, None), Path(tmp) / "model")
        classes = load_model(model_dir)[0].config.num_classes
        return run_e2e(model_dir, store.path, args.runtimes, queries, classes, load, Path(tmp), env)


def _e2e_table(rows: list[E2ERow], nodes: int, concurrency: int) -> Table:
    table = Table(title=f"GraphSAGE over the wire, {nodes:,} nodes (ratios vs {BASELINE_E2E})")
    cols = (
        "framework",
        "protocol",
        "batch 1 P50/P99 ms",
        "batch 32 P50/P99 ms",
        f"nodes/s (b32, c={concurrency})",
        "sampling",
        "in server",
        "x P50 b1",
        "x nodes/s",
    )
    for col in cols:
        table.add_column(col, justify="left" if col in ("framework", "protocol") else "right")
    for r in rows:
        table.add_row(
            r.framework,
            r.protocol,
            f"{r.b1_p50_ms:.2f} / {r.b1_p99_ms:.2f}",
            f"{r.b32_p50_ms:.2f} / {r.b32_p99_ms:.2f}",
            f"{r.nodes_per_s:,.0f}",
            f"{r.sample_share:.0%}",
            f"{r.server_share:.0%}",
            f"{r.speedup_b1_p50:.2f}",
            f"{r.throughput_ratio:.2f}",
        )
    return table


def _table(rows: list[Row], nodes: int) -> Table:
    table = Table(title=f"GraphSAGE pipeline, in-process, {nodes:,} nodes (speed-ups vs {BASELINE})")
    for col in (
        "config",
        "batch",
        "P50 us",
        "P99 us",
        "nodes/s",
        "sample",
        "gather",
        "layers",
        "x P50",
        "x nodes/s",
    ):
        table.add_column(col, justify="left" if col == "config" else "right")
    for r in rows:
        table.add_row(
            r.config,
            str(r.batch),
            f"{r.p50_us:,.0f}",
            f"{r.p99_us:,.0f}",
            f"{r.nodes_per_s:,.0f}",
            f"{r.sample_share:.0%}",
            f"{r.gather_share:.0%}",
            f"{r.layers_share:.0%}",
            f"{r.speedup_p50:.2f}",
            f"{r.throughput_ratio:.2f}",
        )
    return table


def results_markdown(doc: dict[str, Any]) -> str:
    """This run's in-process section of RESULTS.md, from the document written to JSON."""
    from servelab.bench.results_md import markdown_table

    m = doc["meta"]
    head = (
        f"{m['nodes']:,} nodes, {m['queries']:,} query nodes shared by every row, {m['threads']} thread(s) for "
        f"the layers and numba; speed-ups against `{m['baseline']}` at the same batch size.\n\n"
    )
    columns = ("config", "batch", "P50 us", "P99 us", "nodes/s", "sample", "gather", "layers", "x P50",
               "x nodes/s")  # fmt: skip
    rows = [
        (r["config"], r["batch"], f"{r['p50_us']:,.0f}", f"{r['p99_us']:,.0f}", f"{r['nodes_per_s']:,.0f}",
         f"{r['sample_share']:.0%}", f"{r['gather_share']:.0%}", f"{r['layers_share']:.0%}",
         f"{r['speedup_p50']:.2f}", f"{r['throughput_ratio']:.2f}")
        for r in doc["rows"]
    ]  # fmt: skip
    return head + markdown_table(columns, rows)


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1_000_000, help="synthetic graph size (default 1,000,000)")
    p.add_argument(
        "--graph-dir", type=Path, default=None, help="graph store to use or create (default: a temp dir)"
    )
    p.add_argument("--model-dir", type=Path, default=None, help="trained model (default: random weights)")
    p.add_argument("--queries", type=int, default=1000, help="distinct query nodes")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 32], help="batch sizes")
    p.add_argument("--min-calls", type=int, default=300, help="calls per row at least (queries are cycled)")
    p.add_argument("--budget-s", type=float, default=20.0, help="stop a row after this many seconds")
    p.add_argument("--threads", type=int, default=1, help="threads for layers and numba (2 cores: keep 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--e2e", action="store_true", help="also run the over-the-wire rows")
    p.add_argument("--e2e-only", action="store_true", help="only the over-the-wire rows")
    p.add_argument(
        "--runtimes", nargs="+", default=["onnxruntime", "openvino", "torch"], help="e2e layers runtimes"
    )
    p.add_argument("--concurrency", type=int, default=8, help="e2e: batch-32 requests in flight for nodes/s")
    p.add_argument("--duration-s", type=float, default=6.0, help="e2e: seconds per phase at most")
    p.add_argument("--warmup", type=int, default=50, help="e2e: unmeasured calls before each phase")
    p.add_argument(
        "--server-env", nargs="*", default=[], metavar="KEY=VALUE", help="e2e: environment of the servers"
    )
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--results-md", type=Path, default=RESULTS_MD, help=f"rewrite its section {SECTION!r}")
    p.add_argument("--no-results-md", dest="results_md", action="store_const", const=None)
    args = p.parse_args()
    if args.nodes < 2 or args.queries < 1 or min(args.batch) < 1 or args.threads < 1:
        p.error("--nodes must be >= 2; --queries, --batch and --threads must be >= 1")
    if args.queries > args.nodes:
        p.error(f"--queries ({args.queries}) cannot exceed --nodes ({args.nodes})")
    return args


def main() -> None:
    args = _args()
    console = Console(width=max(Console().width, 150))
    rows = [] if args.e2e_only else run_in_process(args, console)
    e2e = run_end_to_end(args, console) if args.e2e or args.e2e_only else []
    if rows:
        console.print(_table(rows, args.nodes))
    if e2e:
        console.print(_e2e_table(e2e, args.nodes, args.concurrency))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "nodes": args.nodes,
        "queries": args.queries,
        "threads": args.threads,
        "machine": platform.processor() or platform.machine(),
        "baseline": BASELINE,
        "e2e_baseline": BASELINE_E2E,
        "e2e_concurrency": args.concurrency,
        "cpus": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],
    }
    result = {"meta": meta, "rows": [asdict(r) for r in rows], "e2e_rows": [asdict(r) for r in e2e]}
    args.out.write_text(json.dumps(result, indent=2))
    console.print(f"wrote {args.out}")
    if rows and args.results_md is not None:  # the e2e rows' section is graphsage_e2e.py's
        from servelab.bench.results_md import write_section

        write_section(args.results_md, SECTION, results_markdown(result))
        console.print(f"wrote section {SECTION!r} of {args.results_md}")


if __name__ == "__main__":
    exit_on_sigterm()  # a SIGTERM (a timeout) still stops the servers this script started
    main()
