"""`servelab demo REPO`: load the repository in-process, run every model, print what happened.

The first screen a newcomer sees: one row per model with the inputs it was given (see ``_demo_inputs``:
ones the model accepts), its outputs and its latency, in a table that fits a 120-column terminal.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from servelab.cli._demo_inputs import demo_inputs, sample_inputs

if TYPE_CHECKING:
    from servelab.engine import Engine

__all__ = ["MAX_WIDTH", "DemoRow", "demo", "make_console", "register", "run_models", "sample_inputs"]

#: the widest the demo prints, whatever the terminal (a newcomer's window is often 120 columns or fewer)
MAX_WIDTH = 120
_WARMUP_CALLS = 10


def make_console() -> Console:
    """A console as wide as the terminal (COLUMNS, or the window), at most MAX_WIDTH; MAX_WIDTH when piped."""
    return Console(width=min(shutil.get_terminal_size((MAX_WIDTH, 24)).columns, MAX_WIDTH))


@dataclass(frozen=True)
class DemoRow:
    """What the demo did with one model: ``status`` is "ok", or "skipped" / "not ready" with ``reason``."""

    model: str
    backend: str
    status: str
    inputs: str = ""
    outputs: str = ""
    p50_us: float | None = None
    p99_us: float | None = None
    reason: str = ""


def _shapes(arrays: dict[str, np.ndarray], with_dtype: bool) -> str:
    def one(name: str, a: np.ndarray) -> str:
        shape = "[" + ",".join(str(d) for d in a.shape) + "]"
        return f"{name} {a.dtype}{shape}" if with_dtype else f"{name} {shape}"

    return "\n".join(one(name, a) for name, a in arrays.items())  # one tensor a line: wraps stay readable


def _timed(engine: Engine, name: str, inputs: dict[str, np.ndarray], calls: int) -> tuple[float, float]:
    times = np.empty(calls, dtype=np.int64)
    for i in range(calls):
        t0 = time.perf_counter_ns()
        engine.infer(name, inputs)
        times[i] = time.perf_counter_ns() - t0
    p50, p99 = np.percentile(times, [50, 99]) / 1e3
    return float(p50), float(p99)


def _run_one(engine: Engine, name: str, ensembles: list[str], calls: int) -> DemoRow:
    from servelab.errors import ServelabError

    meta = engine.get_model_metadata(name)
    backend = engine.get_model_config(name).get("backend") or meta["platform"]
    try:
        given = demo_inputs(engine, name, ensembles)
        result = engine.infer(name, given.arrays)
    except ServelabError as exc:  # the model refused the inputs the demo could make: say so, and why
        return DemoRow(name, backend, "skipped", reason=f"inputs refused: {exc.message}")
    inputs = _shapes(given.arrays, with_dtype=True)
    if given.source != "random":
        inputs += f"\n[dim]{given.source}[/]"
    for _ in range(min(calls, _WARMUP_CALLS)):  # first calls allocate and fill caches: not what is timed
        engine.infer(name, given.arrays)
    p50, p99 = _timed(engine, name, given.arrays, max(calls, 1))
    return DemoRow(name, backend, "ok", inputs, _shapes(result, with_dtype=False), p50, p99)


def collect_rows(repo: Path, calls: int = 200) -> list[DemoRow]:
    """Load every model of ``repo`` in-process and run each: one DemoRow per model of the index."""
    from servelab import Engine

    rows = []
    with Engine(repo) as engine:
        index = engine.get_model_repository_index()
        ready = [r["name"] for r in index if r["state"] == "READY"]
        ensembles = [n for n in ready if engine.get_model_config(n).get("platform") == "ensemble"]
        for entry in index:
            if entry["state"] != "READY":
                rows.append(DemoRow(entry["name"], "-", "not ready", reason=f"{entry['state']}: {entry['reason']}"))
                continue
            rows.append(_run_one(engine, entry["name"], ensembles, calls))
    return rows


def _table(repo: Path, rows: list[DemoRow]) -> Table:
    table = Table(
        title=f"servelab demo: every model in {repo}, in-process", title_justify="left",
        caption="inputs: random values of the declared type and shape (required inputs only), or, for a later "
        "step of an ensemble, what the earlier steps give it", caption_justify="left",
    )  # fmt: skip
    table.add_column("model", no_wrap=True)
    table.add_column("backend", no_wrap=True)
    table.add_column("inputs", ratio=3)
    table.add_column("outputs", ratio=2)
    table.add_column("P50 us", justify="right", no_wrap=True)
    table.add_column("P99 us", justify="right", no_wrap=True)
    for r in rows:
        if r.status == "ok":
            table.add_row(r.model, r.backend, r.inputs, r.outputs, f"{r.p50_us:.0f}", f"{r.p99_us:.0f}")
        else:
            colour = "red" if r.status == "not ready" else "yellow"
            table.add_row(r.model, r.backend, f"[{colour}]{r.status}: {r.reason}[/]", "", "-", "-")
    return table


def run_models(repo: Path, calls: int = 200, console: Console | None = None) -> list[DemoRow]:
    """Run every model of ``repo`` and print the table; returns the rows."""
    rows = collect_rows(repo, calls)
    (console or make_console()).print(_table(repo, rows))
    return rows


def demo(
    repo: Path = typer.Argument(Path("examples/repository"), help="Model repository to demonstrate."),
    calls: int = typer.Option(200, help="Timed calls per model."),
    compare: bool = typer.Option(True, help="End with a short `servelab compare` (when available)."),
) -> None:
    """Load REPO, run every model, then serve it and compare runtimes."""
    console = make_console()
    run_models(repo, calls, console)
    if compare:
        try:
            from servelab.cli.compare import demo_compare
        except ImportError:
            console.print("[yellow]servelab compare is not available in this build; skipping[/]")
            return
        demo_compare(repo, out=console)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
