"""`servelab import tfserving models.config --out REPO`: another server's models as a Triton-layout repository.

The repository serves the same answers on servelab (``servelab serve REPO``; TF Serving clients keep
working, labels included) and the report says which models Triton would load unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from servelab.errors import ServelabError

__all__ = ["app", "register"]

app = typer.Typer(no_args_is_help=True, help="Turn another server's model store or config into a Triton-layout repository.")
console = Console() if Console().is_terminal else Console(width=160)


@app.command("tfserving")
def tfserving(
    config_file: Annotated[Path, typer.Argument(help="TF Serving --model_config_file (ModelServerConfig text format).")],
    out: Annotated[Path, typer.Option("--out", help="The repository to write (absent or empty).")],
    enable_batching: Annotated[bool, typer.Option("--enable-batching", help="TF Serving's default batching for batching signatures.")] = False,
    batching_parameters_file: Annotated[Path | None, typer.Option("--batching-parameters-file", help="TF Serving BatchingParameters file.")] = None,
    copy: Annotated[bool, typer.Option("--copy", help="Copy the SavedModels instead of hard-linking them.")] = False,
    report: Annotated[Path | None, typer.Option("--report", help="Also write the report as Markdown here.")] = None,
) -> None:
    """One model per signature: config.pbtxt (platform tensorflow_savedmodel, version policy, labels) + SavedModels."""
    from servelab.repository.tfserving_batching import TF_SERVING_DEFAULTS, read_batching_parameters
    from servelab.repository.tfserving_import import import_tfserving

    try:
        plan = (read_batching_parameters(batching_parameters_file) if batching_parameters_file
                else TF_SERVING_DEFAULTS if enable_batching else None)
        result = import_tfserving(config_file, out, batching=plan, copy=copy)
    except ServelabError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(code=2) from None
    table = Table(title=f"servelab import tfserving -> {out}")
    for column in ("servelab model", "TF Serving model", "signature", "versions", "written", "Triton", "notes"):
        table.add_column(column)
    for m in result.models:
        table.add_row(m.name, m.tf_model, m.signature, ",".join(map(str, m.versions)),
                      f"no: {m.error}" if m.error else "yes", "yes" if m.triton else "no", "; ".join(m.triton_notes))
    console.print(table)
    for note in result.notes:
        console.print(f"- {note}")
    if report is not None:
        report.write_text(result.markdown())
    if any(m.error for m in result.models):
        raise typer.Exit(code=1)


@app.command("torchserve")
def torchserve(
    source: Annotated[Path, typer.Argument(help="TorchServe config.properties (with model_store) or a model store folder.")],
    out: Annotated[Path, typer.Option("--out", help="The repository to write (absent or empty).")],
    report: Annotated[Path | None, typer.Option("--report", help="Also write the report as Markdown here.")] = None,
) -> None:
    """One model per TorchServe model name: config.pbtxt (backend torchserve_handler) + the unarchived model folders."""
    from servelab.cli._torchserve import torchserve_setup
    from servelab.config.settings import TorchServeSettings
    from servelab.deploy.triton_check import check_repository
    from servelab.repository.torchserve import TorchServeRepository
    from servelab.repository.torchserve_import import import_torchserve

    try:
        setup = torchserve_setup(source if source.is_file() else None, source if source.is_dir() else None,
                                 None, False, True)  # fmt: skip
        settings = TorchServeSettings(**setup.torchserve)
        if settings.model_store is None:
            raise typer.BadParameter(f"{source} names no model_store")
        rows = import_torchserve(TorchServeRepository.from_settings(settings, max_workers=8), out)
    except ServelabError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(code=2) from None
    verdicts = {v.name: v for v in check_repository([out])}
    table = Table(title=f"servelab import torchserve -> {out}")
    for column in ("servelab model", "versions", "archives", "handler", "written", "Triton", "notes"):
        table.add_column(column)
    lines = ["| servelab model | versions | archives | handler | written | loads on Triton | notes |", "|---|---|---|---|---|---|---|"]
    for m in rows:
        verdict = verdicts.get(m.name)
        triton = "no" if verdict is None or verdict.verdict.value == "change" else "yes"
        notes = "; ".join([*m.notes, *(verdict.notes if verdict else [])])
        versions = ", ".join(f"{ts} -> {v}" for v, ts in sorted(m.versions.items()))
        cells = (m.name, versions, ", ".join(m.archives), m.handler, f"no: {m.error}" if m.error else "yes", triton, notes)
        table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    console.print(table)
    if report is not None:
        report.write_text("\n".join(lines) + "\n")
    if any(m.error for m in rows):
        raise typer.Exit(code=1)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="import", help="Import another server's models as a Triton-layout repository.")
