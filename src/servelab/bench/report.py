"""Outputs of a sweep: a Rich table, JSON, CSV. Plots and the HTML report live in ``plots``."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from servelab.bench.results import LevelResult, SweepResult

__all__ = ["CSV_COLUMNS", "level_row", "print_table", "results_table", "write_csv", "write_json"]

CSV_COLUMNS: tuple[str, ...] = (
    "target", "kind", "model", "mode", "level", "workers", "batch_size", "throughput_rps", "inferences_per_s",
    "p50_ms", "p90_ms", "p95_ms", "p99_ms", "p99.9_ms", "mean_ms", "errors", "stable", "client_limited",
    "ceiling_rps", "server_queue_us", "server_compute_input_us", "server_compute_infer_us",
    "server_compute_output_us", "server_rss_mb",
)  # fmt: skip


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def level_row(sweep: SweepResult, lv: LevelResult) -> dict[str, Any]:
    """One flat row per level (the CSV and the HTML table)."""
    lat = lv.summary.percentiles_ms()
    server = lv.server or {}
    row: dict[str, Any] = {
        "target": sweep.target, "kind": sweep.kind, "model": sweep.model, "mode": lv.mode, "level": lv.level,
        "workers": lv.workers, "batch_size": lv.batch_size, "throughput_rps": lv.throughput_rps,
        "inferences_per_s": lv.summary.inferences_per_s, "mean_ms": lv.summary.histogram.mean() * 1e3,
        "errors": sum(lv.errors.values()), "stable": lv.stable, "client_limited": lv.client_limited,
        "ceiling_rps": lv.ceiling_rps, "server_rss_mb": lv.server_rss_mb,
    }  # fmt: skip
    row.update({f"{k}_ms": v for k, v in lat.items()})
    for stage in ("queue", "compute_input", "compute_infer", "compute_output"):
        row[f"server_{stage}_us"] = server.get(f"{stage}_us")
    return _clean(row)


def write_json(sweeps: list[SweepResult], path: str | Path) -> None:
    doc = {"sweeps": [_clean(s.to_dict()) for s in sweeps]}
    Path(path).write_text(json.dumps(doc, indent=2, allow_nan=False))


def write_csv(sweeps: list[SweepResult], path: str | Path) -> None:
    with Path(path).open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(CSV_COLUMNS))
        writer.writeheader()
        for s in sweeps:
            for lv in s.levels:
                writer.writerow(level_row(s, lv))


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def results_table(sweeps: list[SweepResult]) -> Table:
    """Throughput, latency percentiles and server split per level; client-limited rows flagged."""
    table = Table(title="servelab bench", show_lines=False)
    for col in ("target", "load", "req/s", "infer/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "errors",
                "stable", "client", "server queue/infer us"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("target", "load") else "right")
    for s in sweeps:
        for lv in s.levels:
            r = level_row(s, lv)
            load = f"c={lv.level:g}" if lv.mode == "concurrency" else f"{lv.level:g}/s"
            client = {True: "[red]LIMITED[/red]", False: "ok", None: "-"}[lv.client_limited]
            split = (
                "-"
                if lv.server is None
                else f"{_fmt(r['server_queue_us'], 0)}/{_fmt(r['server_compute_infer_us'], 0)}"
            )
            table.add_row(
                f"{s.kind} {s.target}", f"{load} b={lv.batch_size} w={lv.workers}", _fmt(r["throughput_rps"], 1),
                _fmt(r["inferences_per_s"], 1), _fmt(r["p50_ms"]), _fmt(r["p90_ms"]), _fmt(r["p99_ms"]),
                _fmt(r["p99.9_ms"]), str(r["errors"]), "yes" if lv.stable else "[yellow]no[/yellow]", client, split,
            )  # fmt: skip
    return table


def print_table(sweeps: list[SweepResult], console: Console | None = None) -> None:
    (console or Console()).print(results_table(sweeps))
