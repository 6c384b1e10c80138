"""The compare table as text cells (shared by the terminal table) and as a self-contained HTML page."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

__all__ = ["COLUMNS", "row_cells", "write_html"]

COLUMNS: tuple[str, ...] = (
    "target", "protocol", "batch", "P50 ms", "P99 ms", "req/s", "inf/s", "x thr", "x P50", "RSS MB", "stable",
)  # fmt: skip


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def row_cells(row: Any) -> list[str]:
    """One CompareRow as strings, in COLUMNS order."""
    return [
        row.target, row.protocol, str(row.batch_size), _num(row.p50_ms, ".2f"), _num(row.p99_ms, ".2f"),
        _num(row.requests_per_s, ",.0f"), _num(row.inferences_per_s, ",.0f"), _num(row.throughput_ratio, ".2f"),
        _num(row.p50_ratio, ".2f"), _num(row.server_rss_mb, ".0f"),
        ("yes" if row.stable else "no") + (f" ({row.errors} errors)" if row.errors else ""),
    ]  # fmt: skip


_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}
th,td{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}th:first-child,td:first-child,
td:nth-child(2){text-align:left}.bar{display:inline-block;height:10px;background:#4a7bd0;margin-right:6px}
.note{color:#666;font-size:90%}"""


def _bars(rows: list[Any]) -> str:
    """Throughput per target, one block per batch size, as plain CSS bars."""
    parts = []
    for b in sorted({r.batch_size for r in rows}):
        block = [r for r in rows if r.batch_size == b]
        top = max((r.inferences_per_s for r in block), default=0.0) or 1.0
        lines = "".join(
            f"<tr><td>{html.escape(r.target)}</td><td><span class='bar' style='width:{300 * r.inferences_per_s / top:.0f}px'>"
            f"</span>{r.inferences_per_s:,.0f}</td></tr>"
            for r in block
        )
        parts.append(f"<h3>Batch {b}: inferences/s</h3><table>{lines}</table>")
    return "".join(parts)


def write_html(result: Any, path: Path) -> None:
    """Write the comparison (a CompareResult) as one HTML file with no external resources."""
    rows = result.rows()
    spec = result.spec
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row_cells(r)) + "</tr>" for r in rows
    )
    skipped = "".join(
        f"<li><b>{html.escape(o.label)}</b>: {html.escape(o.error or '')}</li>"
        for o in result.outcomes
        if o.error
    )
    described = "".join(
        f"<li><b>{html.escape(o.label)}</b>: {html.escape(', '.join(f'{k}={v}' for k, v in o.description.items() if k != 'target'))}</li>"
        for o in result.outcomes
    )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>servelab compare: {html.escape(spec.model)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>servelab compare: {html.escape(spec.model)}</h1>"
        f"<p class='note'>Closed loop, {spec.concurrency} concurrent requests, client batch sizes "
        f"{', '.join(map(str, spec.batch_sizes))}; windows of {spec.measurement_interval_ms} ms (at most "
        f"{spec.max_windows}); ratios against <b>{html.escape(spec.baseline or 'none')}</b> at the same batch size "
        f"(x thr = inferences/s ratio, x P50 = latency ratio). RSS includes the server's child processes.</p>"
        f"<table><tr>{head}</tr>{body}</table>{_bars(rows)}<h3>Targets</h3><ul>{described}</ul>"
        + (f"<h3>Not measured</h3><ul>{skipped}</ul>" if skipped else "")
        + "</body></html>"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)
