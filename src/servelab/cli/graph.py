"""`servelab graph ...` sub-commands."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True)


# --- train / export (GraphSAGE model) -------------------------------------------------------------


@app.command("train")
def train_cmd(
    graph_dir: Path = typer.Argument(
        ..., help="Graph store folder (from `servelab graph build` or `synth`)."
    ),
    out: Path = typer.Option(..., "--out", help="Model folder to write (model.pt + meta.json)."),
    steps: int = typer.Option(300, help="Adam steps for each model (GraphSAGE and the MLP baseline)."),
    batch_size: int = typer.Option(512, help="Seed nodes per step."),
    aggregator: str = typer.Option("mean", help="SAGE aggregator: mean or pool."),
    hidden: int = typer.Option(256, help="Hidden width."),
    max_seconds: float = typer.Option(240.0, help="Stop each model's training after this many seconds."),
    seed: int = typer.Option(0, help="Random seed."),
) -> None:
    """Train GraphSAGE on a stored graph and compare it with a features-only MLP."""
    from rich.console import Console
    from rich.table import Table

    from servelab.errors import ServelabError
    from servelab.graph.train import TrainConfig, train_to_dir

    try:
        cfg = TrainConfig(
            hidden=hidden,
            aggregator=aggregator,
            batch_size=batch_size,
            steps=steps,
            max_seconds=max_seconds,
            seed=seed,
        )
        report = train_to_dir(graph_dir, out, cfg)
    except (ValueError, OSError, ServelabError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    table = Table("model", "test accuracy", "steps", "seconds", title=f"trained -> {out}")
    table.add_row(
        "GraphSAGE", f"{report.sage_accuracy:.4f}", str(report.sage_steps), f"{report.sage_seconds:.1f}"
    )
    table.add_row(
        "MLP (features only)",
        f"{report.mlp_accuracy:.4f}",
        str(report.mlp_steps),
        f"{report.mlp_seconds:.1f}",
    )
    Console().print(table)


@app.command("export")
def export_cmd(
    model_dir: Path = typer.Argument(..., help="Model folder written by `servelab graph train`."),
    graph: Path = typer.Option(..., "--graph", help="Graph store folder the sampler serves from."),
    repository: Path = typer.Option(..., "--repository", help="Model repository to write into."),
    runtime: str = typer.Option("onnxruntime", help="Layers runtime: onnxruntime, openvino or torch."),
) -> None:
    """Write graphsage_sampler, graphsage_layers and the `sage` ensemble into a model repository."""
    from rich.console import Console

    from servelab.errors import ServelabError
    from servelab.graph.export import export_repository

    try:
        result = export_repository(model_dir, graph, repository, runtime=runtime)
    except (ValueError, OSError, ServelabError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    Console().print(
        f"wrote {repository}: graphsage_sampler, graphsage_layers ({runtime}), sage "
        f"(parity with eager: max |diff| {result['max_abs_diff']:.2e})"
    )
