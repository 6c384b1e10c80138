"""`servelab demo REPO`: load the repository in-process, run every model once, print what happened."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

console = Console(width=150)


def sample_inputs(meta: dict[str, Any], batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs shaped from model metadata (-1 dims become ``batch`` first, then 4)."""
    from servelab.types import DataType

    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for spec in meta["inputs"]:
        dt = DataType(spec["datatype"])
        shape = [batch if i == 0 and d == -1 else (4 if d == -1 else d) for i, d in enumerate(spec["shape"])]
        if dt is DataType.BYTES:
            out[spec["name"]] = np.array([b"servelab"] * int(np.prod(shape)), dtype=object).reshape(shape)
        elif dt is DataType.BOOL:
            out[spec["name"]] = rng.integers(0, 2, shape).astype(bool)
        elif dt.numpy_dtype.kind in "iu":
            hi = 10 if spec["name"] != "node_ids" else 100
            out[spec["name"]] = rng.integers(0, hi, shape).astype(dt.numpy_dtype)
        else:
            out[spec["name"]] = rng.standard_normal(shape).astype(dt.numpy_dtype)
    return out


def run_models(repo: Path, calls: int = 200) -> None:
    from servelab import Engine
    from servelab.errors import ServelabError

    table = Table(title=f"servelab demo: every model in {repo}, in-process")
    for col in ("model", "backend", "state", "inputs", "outputs", "P50 us", "P99 us"):
        table.add_column(col)
    with Engine(repo) as engine:
        for row in engine.get_model_repository_index():
            name = row["name"]
            if row["state"] != "READY":
                table.add_row(name, "-", f"[red]{row['state']}[/]", row["reason"][:60], "", "", "")
                continue
            meta = engine.get_model_metadata(name)
            backend = engine.get_model_config(name).get("backend", meta["platform"])
            inputs = sample_inputs(meta)
            try:
                result = engine.infer(name, inputs)
            except ServelabError as exc:  # e.g. random data that is not valid for this model
                table.add_row(name, backend, "[green]READY[/]", f"[yellow]random input refused: {exc.message[:60]}[/]",
                              "", "", "")
                continue
            times = []
            for _ in range(calls):
                t0 = time.perf_counter_ns()
                engine.infer(name, inputs)
                times.append(time.perf_counter_ns() - t0)
            describe = ", ".join(f"{k} {v.dtype}{list(v.shape)}" for k, v in inputs.items())
            outs = ", ".join(f"{k} {list(v.shape)}" for k, v in result.items())
            p50, p99 = np.percentile(times, [50, 99]) / 1e3
            table.add_row(name, backend, "[green]READY[/]", describe, outs, f"{p50:.0f}", f"{p99:.0f}")
    console.print(table)


def demo(
    repo: Path = typer.Argument(Path("examples/repository"), help="Model repository to demonstrate."),
    calls: int = typer.Option(200, help="Timed calls per model."),
    compare: bool = typer.Option(True, help="End with a short `servelab compare` (when available)."),
) -> None:
    """Load REPO, run every model, then serve it and compare runtimes."""
    run_models(repo, calls)
    if compare:
        try:
            from servelab.cli.compare import demo_compare
        except ImportError:
            console.print("[yellow]servelab compare is not available in this build; skipping[/]")
            return
        demo_compare(repo)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
