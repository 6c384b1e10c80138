"""End-to-end GraphSAGE rows for benchmarks/graphsage.py: `sage` and `sage_fused` behind `servelab serve`.

One server per layers runtime (ONNX Runtime, OpenVINO, TorchScript), each a subprocess on free ports of
127.0.0.1 serving a repository written by ``export_repository``; both the three-model ``sage`` ensemble and the
one-call ``sage_fused`` model are measured on it (the latter not for TorchScript: its dense graph is ONNX). The
TorchServe-style baseline: a minimal FastAPI app in a subprocess running the pure-Python sampler and eager torch
in one handler, JSON in and out. The servers are started and measured in benchmarks/graphsage_servers.py,
the clients and the closed loop are in benchmarks/graphsage_wire.py.

Real TorchServe 0.12, where its venv is installed (``.peers/torchserve``, see
servelab.bench.peers.torchserve_graphsage): the same Python sampler + torch (TorchScript) in a TorchServe
handler, one worker, measured over its REST API and its gRPC Predictions API with the same queries and load.
It is the baseline the issue's end-to-end ratios are taken against, like for like (``vs_torchserve_*``: gRPC
rows against its gRPC, REST rows against its REST); the FastAPI app is a stronger Python baseline, reported too
(``speedup_b1_p50`` / ``throughput_ratio``).

The real Triton 2.51 (``--triton``, the default; installed under ``.peers/triton`` on first use) serving the
published hybrid as a python-backend model (servelab.bench.peers.triton_graphsage): servelab's numba sampler
kernels and the export's layers ONNX on onnxruntime, over the same graph store, called with the same OIP
clients over gRPC and REST binary. ``triton_bar`` in the JSON holds issue 14's GraphSAGE bar: ``sage_fused``
over gRPC against it over gRPC, nodes/s ratio >= 2 and batch-1 P50 ratio <= 0.5.

Run on its own, this script also measures in-process rows (servelab's Engine on ``sage`` and ``sage_fused``
against the TorchServe-style function: Python sampler + torch eager), prints the like-for-like ratios
(in-process with in-process, end-to-end with end-to-end) and writes benchmarks/results/graphsage_e2e.json:

    .venv/bin/python benchmarks/graphsage_e2e.py --graph-dir G --model-dir M
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.config.grpc_runtime import CLIENT_EXPERIMENTS, disable_grpc_experiments

disable_grpc_experiments(CLIENT_EXPERIMENTS)  # before grpc is imported, as graphsage_wire does

import numpy as np  # noqa: E402
from graphsage_e2e_tables import BAR_FRAMEWORK, TRITON_NODES_RATIO, TRITON_P50_RATIO  # noqa: E402
from graphsage_servers import baseline_row, servelab_rows, torchserve_rows, triton_rows  # noqa: E402
from graphsage_wire import (  # noqa: E402
    BASELINE_E2E,
    LABELS,
    PEERS_DIR,
    TORCHSERVE_E2E,
    TRITON_E2E,
    E2ERow,
    Load,
    TorchServeOptions,
    TritonOptions,
)

from servelab.config.signals import exit_on_sigterm  # noqa: E402
from servelab.graph.export import export_repository  # noqa: E402

__all__ = ["BASELINE_E2E", "E2ERow", "Load", "TorchServeOptions", "TritonOptions", "comparisons", "run_e2e",
           "triton_bar"]


def same_protocol(row: E2ERow, candidates: list[E2ERow]) -> E2ERow | None:
    """The baseline row a servelab row is compared with: gRPC with gRPC, HTTP (REST binary) with HTTP."""
    want_grpc = row.protocol == "gRPC"
    return next((c for c in candidates if (c.protocol == "gRPC") == want_grpc), None)


def run_e2e(
    model_dir: Path,
    graph_dir: Path,
    runtimes: list[str],
    queries: np.ndarray,
    classes: int,
    load: Load,
    workdir: Path,
    server_env: dict[str, str],
    torchserve: TorchServeOptions | None = TorchServeOptions(),
    triton: TritonOptions | None = None,
    fused_instances: int | None = None,
) -> list[E2ERow]:
    """Every servelab runtime over gRPC and REST binary, then the real Triton with the GraphSAGE python model
    (None: not run), real TorchServe (where installed; None: never) and the FastAPI baseline; ratios against
    TorchServe and FastAPI. ``fused_instances``: ``sage_fused``'s instance count (None: the export's default)."""
    rows: list[E2ERow] = []
    for runtime in runtimes:
        repo = workdir / f"repo-{runtime}"
        export_repository(model_dir, graph_dir, repo, runtime=runtime, fused_instances=fused_instances)
        print(f"serving {repo} ({runtime}) ...", flush=True)
        rows += servelab_rows(repo, runtime, queries, classes, load, workdir, server_env)
    if triton is not None:
        repo = workdir / "repo-onnxruntime"  # the export sage_fused served: same graph store, same layers ONNX
        if not (repo / "sage_fused" / "config.pbtxt").is_file():
            export_repository(model_dir, graph_dir, repo, runtime="onnxruntime")
        print("serving GraphSAGE with the real Triton (python backend) ...", flush=True)
        rows += triton_rows(repo, queries, classes, load, triton)
    ts: list[E2ERow] = []
    if torchserve is not None:
        print("serving GraphSAGE with real TorchServe ...", flush=True)
        ts = torchserve_rows(model_dir, graph_dir, queries, classes, load, torchserve)
    rows += ts
    print("serving the TorchServe-style FastAPI baseline ...", flush=True)
    base = baseline_row(model_dir, graph_dir, queries, classes, load, workdir)
    rows.append(base)
    for row in rows:
        row.speedup_b1_p50 = base.b1_p50_ms / row.b1_p50_ms
        row.throughput_ratio = row.nodes_per_s / base.nodes_per_s
        peer = same_protocol(row, ts)
        if peer is not None:
            row.vs_torchserve_b1_p50 = peer.b1_p50_ms / row.b1_p50_ms
            row.vs_torchserve_nodes_per_s = row.nodes_per_s / peer.nodes_per_s
    return rows


def triton_bar(rows: list[E2ERow]) -> dict[str, Any] | None:
    """Issue 14's GraphSAGE bar: ``sage_fused`` over gRPC against the Triton pipeline over gRPC (None
    when either row is missing from this run)."""
    fused = next((r for r in rows if r.framework == BAR_FRAMEWORK and r.protocol == "gRPC"), None)
    peer = next((r for r in rows if r.framework == TRITON_E2E and r.protocol == "gRPC"), None)
    if fused is None or peer is None:
        return None
    nodes_ratio = fused.nodes_per_s / peer.nodes_per_s
    p50_ratio = fused.b1_p50_ms / peer.b1_p50_ms
    return {
        "servelab": f"{fused.framework} / gRPC", "triton": f"{peer.framework} / gRPC",
        "nodes_per_s": (fused.nodes_per_s, peer.nodes_per_s), "b1_p50_ms": (fused.b1_p50_ms, peer.b1_p50_ms),
        "nodes_ratio": nodes_ratio, "b1_p50_ratio": p50_ratio,
        "met": nodes_ratio >= TRITON_NODES_RATIO and p50_ratio <= TRITON_P50_RATIO,
    }  # fmt: skip


def _print_triton_bar(bar: dict[str, Any] | None) -> None:
    if bar is None:
        print("Triton bar: not measured (no sage_fused or no Triton gRPC row in this run)")
        return
    print(
        f"Triton bar (gRPC): sage_fused {bar['nodes_per_s'][0]:,.0f} vs Triton {bar['nodes_per_s'][1]:,.0f} nodes/s "
        f"= {bar['nodes_ratio']:.2f}x (>= {TRITON_NODES_RATIO:g}); batch-1 P50 {bar['b1_p50_ms'][0]:.2f} vs "
        f"{bar['b1_p50_ms'][1]:.2f} ms = {bar['b1_p50_ratio']:.2f}x (<= {TRITON_P50_RATIO:g}): "
        f"{'met' if bar['met'] else 'NOT met'}",
        flush=True,
    )


# ----- standalone: in-process rows, like-for-like ratios, JSON -----
RESULTS = Path(__file__).parent / "results" / "graphsage_e2e.json"
INPROC_SERVELAB = "servelab Engine, sage ensemble (numba + ONNX Runtime)"
INPROC_FUSED = "servelab Engine, sage_fused (numba + ONNX Runtime)"
INPROC_BASELINE = "TorchServe-style function (Python sampler + torch eager)"
TARGET_RATIO = 3.0


@dataclass
class InProcRow:
    config: str
    b1_p50_ms: float
    b1_p99_ms: float
    b32_p50_ms: float
    b32_p99_ms: float
    nodes_per_s: float  # batch 32, one caller, back to back
    calls: int


@dataclass
class Comparison:
    scope: str  # "in-process" or "end-to-end"
    servelab: str
    baseline: str
    b1_p50_ms: tuple[float, float]  # (servelab, baseline)
    nodes_per_s: tuple[float, float]
    b1_p50_ratio: float  # baseline / servelab: > 1 is servelab faster
    nodes_ratio: float  # servelab / baseline
    meets_3x: bool


def _in_process(
    model_dir: Path, graph_dir: Path, repo: Path, queries: np.ndarray, calls: int, budget_s: float
) -> list[InProcRow]:
    """servelab's Engine on the exported ``sage`` ensemble against the TorchServe-style function."""
    import graphsage_timing  # the timing loop of benchmarks/graphsage.py's rows
    import torch

    from servelab import Engine
    from servelab.graph.model import load_model
    from servelab.graph.sampler import PythonSampler
    from servelab.graph.sessions import eager_runner
    from servelab.graph.store import GraphStore

    torch.set_num_threads(1)  # the baseline's layers: one thread, as in graphsage.py's default
    model, _ = load_model(model_dir)
    store = GraphStore.open(graph_dir)
    baseline = graphsage_timing.pipeline(PythonSampler(store, model.config.fanouts, 0), store, eager_runner(model))
    rows = []

    def measure(name: str, fn: Callable[[np.ndarray], tuple[int, int, int]]) -> None:
        b1, b32 = (graphsage_timing.measure(name, fn, queries, b, calls, budget_s) for b in (1, 32))
        row = InProcRow(name, b1.p50_us / 1e3, b1.p99_us / 1e3, b32.p50_us / 1e3, b32.p99_us / 1e3,
                        b32.nodes_per_s, b1.calls + b32.calls)  # fmt: skip
        rows.append(row)
        print(f"  in-process {name}: b1 {row.b1_p50_ms:.3f} ms, {row.nodes_per_s:,.0f} nodes/s", flush=True)

    # One at a time: with the Engine open (its runtimes' thread pools alive) the baseline's batch-32
    # P50 tripled on 2 cores.
    for name, model in ((INPROC_SERVELAB, "sage"), (INPROC_FUSED, "sage_fused")):
        with Engine(repo, load_models=["graphsage_sampler", "graphsage_layers", "sage"] if model == "sage" else [model]) as engine:

            def servelab(ids: np.ndarray, model: str = model) -> tuple[int, int, int]:
                t0 = time.perf_counter_ns()
                engine.infer(model, {"node_ids": ids}, outputs=["logits"])
                return 0, 0, time.perf_counter_ns() - t0

            measure(name, servelab)
    measure(INPROC_BASELINE, baseline)
    return rows


def _compare(scope: str, mine: InProcRow | E2ERow, base: InProcRow | E2ERow) -> Comparison:
    def label(r: InProcRow | E2ERow) -> str:
        return r.config if isinstance(r, InProcRow) else f"{r.framework} / {r.protocol}"

    p50 = base.b1_p50_ms / mine.b1_p50_ms
    nodes = mine.nodes_per_s / base.nodes_per_s
    return Comparison(
        scope, label(mine), label(base), (mine.b1_p50_ms, base.b1_p50_ms), (mine.nodes_per_s, base.nodes_per_s),
        p50, nodes, p50 >= TARGET_RATIO and nodes >= TARGET_RATIO,
    )  # fmt: skip


def comparisons(inproc: list[InProcRow], e2e: list[E2ERow]) -> list[Comparison]:
    """In-process with in-process; every servelab wire row with TorchServe, then with FastAPI."""
    out = []
    base_inproc = next((r for r in inproc if r.config == INPROC_BASELINE), None)
    if base_inproc is not None:
        out += [_compare("in-process", r, base_inproc) for r in inproc if r is not base_inproc]
    mine = [r for r in e2e if r.framework.startswith("servelab")]
    for name in (TORCHSERVE_E2E, BASELINE_E2E):
        bases = [r for r in e2e if r.framework == name]
        for r in mine:
            base = same_protocol(r, bases) or (bases[0] if bases else None)
            out += [_compare("end-to-end", r, base)] if base is not None else []
    return out


def _print_comparisons(rows: list[Comparison], concurrency: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"GraphSAGE like for like: batch-1 P50 and batch-32 nodes/s (e2e at c={concurrency})")
    for col in ("scope", "servelab", "baseline", "b1 P50 ms", "x P50", "nodes/s", "x nodes/s", ">= 3x"):
        table.add_column(col, justify="left" if col in ("scope", "servelab", "baseline") else "right")
    for c in rows:
        table.add_row(
            c.scope, c.servelab, c.baseline, f"{c.b1_p50_ms[0]:.2f} vs {c.b1_p50_ms[1]:.2f}",
            f"{c.b1_p50_ratio:.2f}", f"{c.nodes_per_s[0]:,.0f} vs {c.nodes_per_s[1]:,.0f}",
            f"{c.nodes_ratio:.2f}", "yes" if c.meets_3x else "NO",
        )  # fmt: skip
    Console(width=200).print(table)


def results_sections(doc: dict[str, Any]) -> dict[str, str]:
    """This run's sections of RESULTS.md (see graphsage_e2e_tables), from the document written to JSON."""
    from graphsage_e2e_tables import sections

    return sections(doc)


def _repo_relative(path: Path) -> str:
    """``path`` as written into the results: relative to the repository when inside it, else its name."""
    root = Path(__file__).resolve().parent.parent
    path = Path(path).resolve()
    return str(path.relative_to(root)) if path.is_relative_to(root) else path.name


def _main_args() -> Any:
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graph-dir", type=Path, required=True, help="graph store (servelab graph synth/build)")
    p.add_argument("--model-dir", type=Path, required=True, help="trained model (servelab graph train)")
    p.add_argument(
        "--runtimes", nargs="*", default=["onnxruntime"], choices=sorted(LABELS), help="servelab runtimes"
    )
    p.add_argument("--queries", type=int, default=1000, help="distinct query nodes (same for every row)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=8, help="batch-32 requests in flight for nodes/s")
    p.add_argument("--duration-s", type=float, default=4.0, help="seconds per phase (cell) at most")
    p.add_argument("--calls", type=int, default=1000, help="calls per phase at most (x concurrency)")
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--no-in-process", action="store_true", help="skip the in-process rows")
    p.add_argument("--no-torchserve", action="store_true", help="skip real TorchServe")
    p.add_argument("--peers-dir", type=Path, default=PEERS_DIR, help="where TorchServe's venv and Triton live")
    p.add_argument("--ts-torch-threads", type=int, default=1, help="torch threads in TorchServe's worker")
    p.add_argument("--ts-batch-size", type=int, default=1, help="TorchServe's batch_size (requests merged)")
    p.add_argument("--triton", action=argparse.BooleanOptionalAction, default=True,
                   help="the real Triton with the GraphSAGE python model (installed under --peers-dir)")  # fmt: skip
    p.add_argument("--triton-instances", type=int, default=2,
                   help="Triton model instances (python stub processes): one per core here")  # fmt: skip
    p.add_argument("--triton-layers-threads", type=int, default=1, help="onnxruntime threads per Triton instance")
    p.add_argument("--fused-instances", type=int, default=2,
                   help="sage_fused's instance_group count: one per core here, as --triton-instances "
                   "(0: the one `servelab graph export` writes)")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--results-md", type=Path, default=RESULTS.parent.parent / "RESULTS.md",
                   help="rewrite its sections (graphsage_e2e_tables.SECTIONS) of this file")  # fmt: skip
    p.add_argument("--no-results-md", dest="results_md", action="store_const", const=None)
    return p.parse_args()


def main() -> None:
    import json
    import tempfile
    from dataclasses import asdict

    from servelab.graph.model import load_model
    from servelab.graph.store import GraphStore

    args = _main_args()
    load_before = os.getloadavg()
    store = GraphStore.open(args.graph_dir)
    rng = np.random.default_rng(args.seed)
    queries = rng.choice(store.num_nodes, size=args.queries, replace=False).astype(np.int64)
    classes = load_model(args.model_dir)[0].config.num_classes
    load = Load(args.warmup, args.calls, args.duration_s, args.concurrency)
    ts = (
        None
        if args.no_torchserve
        else TorchServeOptions(args.peers_dir, args.ts_torch_threads, args.ts_batch_size)
    )
    triton = (
        TritonOptions(args.peers_dir, args.triton_instances, args.triton_layers_threads) if args.triton else None
    )
    with tempfile.TemporaryDirectory(prefix="servelab-sage-e2e-") as tmp:
        inproc: list[InProcRow] = []
        if not args.no_in_process:
            repo = Path(tmp) / "inproc-onnxruntime"
            export_repository(args.model_dir, args.graph_dir, repo, runtime="onnxruntime")
            print("in-process rows ...", flush=True)
            inproc = _in_process(args.model_dir, args.graph_dir, repo, queries, 300, args.duration_s)
        e2e = run_e2e(
            args.model_dir, args.graph_dir, args.runtimes, queries, classes, load, Path(tmp), {}, ts, triton,
            args.fused_instances or None,
        )
    found = comparisons(inproc, e2e)
    _print_comparisons(found, args.concurrency)
    bar = triton_bar(e2e)
    _print_triton_bar(bar)
    meta = {
        "nodes": store.num_nodes, "edges": store.num_edges, "queries": args.queries, "concurrency": args.concurrency,
        "duration_s_per_phase": args.duration_s, "torchserve": None if ts is None else {**asdict(ts), "peers_dir": _repo_relative(ts.peers_dir)},
        "cpus": os.cpu_count(), "load_avg_before": load_before, "load_avg_after": os.getloadavg(),
        "target_ratio": TARGET_RATIO, "client_grpc_experiments": os.environ.get("GRPC_EXPERIMENTS"),
        "triton": None if triton is None else {**asdict(triton), "peers_dir": _repo_relative(triton.peers_dir)},
    }  # fmt: skip
    result = {
        "meta": meta,
        "in_process": [asdict(r) for r in inproc],
        "e2e_rows": [asdict(r) for r in e2e],
        "comparisons": [asdict(c) for c in found],
        "triton_bar": bar,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, allow_nan=True))
    print(f"wrote {args.out} (load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f})")
    if args.results_md is not None:
        from servelab.bench.results_md import write_section

        for name, markdown in results_sections(json.loads(json.dumps(result, allow_nan=True))).items():
            write_section(args.results_md, name, markdown)
            print(f"wrote section {name!r} of {args.results_md}")


if __name__ == "__main__":
    exit_on_sigterm()  # a SIGTERM (a timeout) still stops the servers this script started
    main()
