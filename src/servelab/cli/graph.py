"""`servelab graph ...` sub-commands: build, synth (train and export are added beside them)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from servelab.errors import ServelabError

app = typer.Typer(no_args_is_help=True)
_console = Console()


def _report_table(title: str, report: dict[str, object]) -> Table:
    table = Table(title=title, show_header=False)
    for key, value in report.items():
        if key == "warnings":
            continue
        table.add_row(key.replace("_", " "), _fmt(value))
    return table


def _fmt(value: object) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:,.3f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _fail(exc: ServelabError) -> typer.Exit:
    _console.print(f"[red]error:[/red] {exc.message}")
    return typer.Exit(code=2)


def _load_npy(path: Path | None) -> Any:
    """A memory-mapped .npy array, or None."""
    if path is None:
        return None
    import numpy as np

    return np.load(path, mmap_mode="r")


@app.command("build")
def build_command(
    edges: Annotated[Path, typer.Argument(help="Edge list: CSV/TSV (2 integer columns), Parquet (src, dst) or .npy [E, 2].")],
    out: Annotated[Path, typer.Option("--out", help="Folder to write the graph store to.")],
    num_nodes: Annotated[int | None, typer.Option(help="Node count (default: largest id + 1).")] = None,
    features: Annotated[Path | None, typer.Option(help=".npy float array [num_nodes, F].")] = None,
    labels: Annotated[Path | None, typer.Option(help=".npy integer array [num_nodes].")] = None,
    feature_dtype: Annotated[str, typer.Option(help="float32 or float16.")] = "float32",
    directed: Annotated[bool, typer.Option("--directed", help="Keep edges one-way (default: store both ways).")] = False,
) -> None:
    """Validate an edge list and build a memory-mapped graph store."""
    from servelab.graph.store import build_from_edge_file

    try:
        store, rep = build_from_edge_file(
            edges, out, num_nodes, _load_npy(features), _load_npy(labels),
            feature_dtype=feature_dtype, symmetric=not directed, progress=True,
        )
    except ServelabError as exc:
        raise _fail(exc) from exc
    _console.print(_report_table(f"graph store {store.path}", rep.as_dict()))
    for warning in rep.warnings:
        _console.print(f"[yellow]warning:[/yellow] {warning}")


@app.command("synth")
def synth_command(
    out: Annotated[Path, typer.Option("--out", help="Folder to write the graph store to.")],
    nodes: Annotated[int, typer.Option(help="Number of nodes.")] = 1_000_000,
    avg_degree: Annotated[float, typer.Option(help="Mean stored (both-way) edges per node.")] = 15,
    features: Annotated[int, typer.Option(help="Feature dimensions.")] = 128,
    classes: Annotated[int, typer.Option(help="Communities = label classes.")] = 16,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    homophily: Annotated[float, typer.Option(help="Share of edges drawn inside a community.")] = 0.8,
    feature_dtype: Annotated[str, typer.Option(help="float32 or float16.")] = "float32",
) -> None:
    """Write a synthetic power-law graph with communities, features, labels and splits."""
    from servelab.graph.synth import synth_graph

    try:
        store = synth_graph(
            out, nodes, avg_degree, features, classes, seed,
            homophily=homophily, feature_dtype=feature_dtype, progress=True,
        )
    except ServelabError as exc:
        raise _fail(exc) from exc
    summary = dict(store.manifest["build"])  # type: ignore[call-overload]
    summary["seconds"] = store.manifest["synth"]["seconds"]  # type: ignore[index]
    _console.print(_report_table(f"synthetic graph {store.path}", summary))


@app.command("train")
def train_command(
    graph_dir: Annotated[Path, typer.Argument(help="Graph store folder (from `servelab graph build` or `synth`).")],
    out: Annotated[Path, typer.Option("--out", help="Model folder to write (model.pt + meta.json).")],
    steps: Annotated[int, typer.Option(help="Adam steps for each model (GraphSAGE, MLP baseline).")] = 300,
    batch_size: Annotated[int, typer.Option(help="Seed nodes per step.")] = 512,
    aggregator: Annotated[str, typer.Option(help="SAGE aggregator: mean or pool.")] = "mean",
    hidden: Annotated[int, typer.Option(help="Hidden width.")] = 256,
    max_seconds: Annotated[float, typer.Option(help="Stop each model's training after this long.")] = 240.0,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
) -> None:
    """Train GraphSAGE on a stored graph and compare it with a features-only MLP."""
    from servelab.graph.train import TrainConfig, train_to_dir

    try:
        cfg = TrainConfig(
            hidden=hidden, aggregator=aggregator, batch_size=batch_size, steps=steps, max_seconds=max_seconds, seed=seed
        )
        rep = train_to_dir(graph_dir, out, cfg)
    except ValueError as exc:
        raise _fail(ServelabError(str(exc))) from exc
    except ServelabError as exc:
        raise _fail(exc) from exc
    table = Table("model", "test accuracy", "steps", "seconds", title=f"trained -> {out}")
    table.add_row("GraphSAGE", f"{rep.sage_accuracy:.4f}", str(rep.sage_steps), f"{rep.sage_seconds:.1f}")
    table.add_row("MLP (features only)", f"{rep.mlp_accuracy:.4f}", str(rep.mlp_steps), f"{rep.mlp_seconds:.1f}")
    _console.print(table)


@app.command("export")
def export_command(
    model_dir: Annotated[Path, typer.Argument(help="Model folder written by `servelab graph train`.")],
    graph: Annotated[Path, typer.Option("--graph", help="Graph store folder the sampler serves from.")],
    repository: Annotated[Path, typer.Option("--repository", help="Model repository to write into.")],
    runtime: Annotated[str, typer.Option(help="Layers runtime: onnxruntime, openvino or torch.")] = "onnxruntime",
) -> None:
    """Write graphsage_sampler, graphsage_layers, the `sage` ensemble and `sage_fused` into a model repository."""
    from servelab.graph.export import export_repository

    try:
        result = export_repository(model_dir, graph, repository, runtime=runtime)
    except (ValueError, FileNotFoundError) as exc:
        raise _fail(ServelabError(str(exc))) from exc
    except ServelabError as exc:
        raise _fail(exc) from exc
    fused = ", sage_fused" if (Path(repository) / "sage_fused" / "config.pbtxt").is_file() else ""
    _console.print(
        f"wrote {repository}: graphsage_sampler, graphsage_layers ({runtime}), sage{fused} "
        f"(parity with eager: max |diff| {result['max_abs_diff']:.2e})"
    )
