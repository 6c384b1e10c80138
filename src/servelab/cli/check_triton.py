"""`servelab check-triton REPO`: model by model, would the repository load unchanged on Triton?

Exit status 0 when every model would, 1 when some need a change (the table says which and how), 2 for a
folder that is not a repository.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from servelab.errors import ServelabError

__all__ = ["check_triton", "register"]

_STYLE = {"ok": "green", "note": "yellow", "change": "red"}


def check_triton(
    repositories: Annotated[list[Path], typer.Argument(help="Model repository folders.", show_default=False)],
) -> None:
    """Whether each model loads unchanged on Triton Inference Server, and what to change where not."""
    from servelab.deploy.triton_check import Verdict, check_repository

    try:
        verdicts = check_repository(repositories)
    except ServelabError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from None
    table = Table(title="Triton Inference Server compatibility")
    for column in ("model", "backend", "verdict", "what to change / notes"):
        table.add_column(column)
    for v in verdicts:
        style = _STYLE[v.verdict.value]
        table.add_row(v.name, v.backend, f"[{style}]{v.verdict.value}[/{style}]", "\n".join(v.notes) or "-")
    Console(width=160).print(table)
    if any(v.verdict is Verdict.CHANGE for v in verdicts):
        raise typer.Exit(code=1)


def register(app: typer.Typer) -> None:
    app.command("check-triton")(check_triton)
