"""The compare table as text cells (shared by the terminal table) and as a self-contained HTML page."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["COLUMNS", "ONE_ROUND_COLUMNS", "SPREAD", "best_cells", "chart_png", "row_cells", "write_html"]

#: the spread over rounds: min-max of inf/s
SPREAD = "inf/s min-max"
COLUMNS: tuple[str, ...] = (
    "target", "protocol", "batch", "P50 ms", "P99 ms", "req/s", "inf/s", SPREAD, "x thr", "x P50", "RSS MB",
    "stable",
)  # fmt: skip
#: the table of a document written before compare had rounds (no spread to show)
ONE_ROUND_COLUMNS: tuple[str, ...] = tuple(c for c in COLUMNS if c != SPREAD)

#: what each column means, shown under the HTML table
COLUMN_HELP: tuple[tuple[str, str], ...] = (
    ("batch", "samples per request (client-side batch)"),
    ("P50 ms / P99 ms", "median and 99th-percentile request latency seen by the client"),
    ("req/s, inf/s", "requests and inferences (requests x batch) completed per second"),
    ("inf/s min-max", "the lowest and highest inf/s over the rounds (the row shows the median round)"),
    ("x thr", "inf/s divided by the baseline's inf/s at the same batch size in the same round, median over "
              "rounds (higher is better)"),
    ("x P50", "P50 divided by the baseline's P50 at the same batch size in the same round, median over "
              "rounds (lower is better)"),
    ("RSS MB", "resident memory of the server process and its children (- for in-process)"),
    ("stable", "yes when the last 3 windows agreed within 10% in req/s and P50; "
               "no when the level hit the window limit first (the numbers are still measured)"),
)  # fmt: skip

#: column -> (value of a row, True when higher is better); the cells the report ranks
_RANKED: dict[str, tuple[Callable[[Any], float | None], bool]] = {
    "P50 ms": (lambda r: r.p50_ms, False),
    "P99 ms": (lambda r: r.p99_ms, False),
    "req/s": (lambda r: r.requests_per_s, True),
    "inf/s": (lambda r: r.inferences_per_s, True),
    "RSS MB": (lambda r: r.server_rss_mb, False),
}


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _spread(row: Any) -> str:
    lo, hi = row.inferences_per_s_min, row.inferences_per_s_max
    return "-" if lo is None or hi is None else f"{lo:,.0f}-{hi:,.0f}"


def row_cells(row: Any, columns: tuple[str, ...] = COLUMNS) -> list[str]:
    """One CompareRow as strings, in ``columns`` order (COLUMNS, or ONE_ROUND_COLUMNS for an old document)."""
    cells = {
        "target": row.target, "protocol": row.protocol, "batch": str(row.batch_size),
        "P50 ms": _num(row.p50_ms, ".2f"), "P99 ms": _num(row.p99_ms, ".2f"),
        "req/s": _num(row.requests_per_s, ",.0f"), "inf/s": _num(row.inferences_per_s, ",.0f"), SPREAD: _spread(row),
        "x thr": _num(row.throughput_ratio, ".2f"), "x P50": _num(row.p50_ratio, ".2f"),
        "RSS MB": _num(row.server_rss_mb, ".0f"),
        "stable": ("yes" if row.stable else "no") + (f" ({row.errors} errors)" if row.errors else ""),
    }  # fmt: skip
    return [cells[c] for c in columns]


def best_cells(rows: list[Any], baseline: str | None) -> set[tuple[int, int]]:
    """(row index, column index) of the best P50, P99, req/s, inf/s and RSS per batch size.

    The baseline is the reference, not a contender, so it is not ranked (unless it is the only row of its
    batch size); ties are all marked."""
    marked: set[tuple[int, int]] = set()
    for b in {r.batch_size for r in rows}:
        group = [i for i, r in enumerate(rows) if r.batch_size == b]
        contenders = [i for i in group if rows[i].target != baseline] or group
        for name, (value, higher) in _RANKED.items():
            col = COLUMNS.index(name)
            vals = {i: value(rows[i]) for i in contenders}
            known = {i: v for i, v in vals.items() if v is not None and v == v}
            if len(known) < 2 and len(contenders) > 1:
                continue  # nothing to rank against
            if known:
                top = max(known.values()) if higher else min(known.values())
                marked.update((i, col) for i, v in known.items() if v == top)
    return marked


def chart_png(rows: list[Any], batch_size: int, baseline: str | None = None) -> bytes:
    """Two panels for one batch size: inferences/s per target, and P50 (bar) with P99 (tick) per target."""
    # lazy: the terminal table does not need matplotlib
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    block = [r for r in rows if r.batch_size == batch_size]
    labels = [r.target for r in block]
    ys = list(range(len(block)))[::-1]  # first target on top
    colors = ["#9aa5b1" if r.target == baseline else "#3b6fc4" for r in block]
    fig = Figure(figsize=(11, 0.45 * len(block) + 1.3))
    thr, lat = fig.subplots(1, 2, sharey=True)
    thr.barh(ys, [r.inferences_per_s for r in block], color=colors)
    top = max((r.inferences_per_s for r in block), default=0.0) or 1.0
    for y, r in zip(ys, block, strict=True):
        thr.text(r.inferences_per_s + top * 0.01, y, f"{r.inferences_per_s:,.0f}", va="center", fontsize=9)
    thr.set_xlim(0, top * 1.25)
    thr.xaxis.set_major_locator(MaxNLocator(5))
    thr.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:,.0f}"))
    thr.set_title(f"batch {batch_size}: inferences/s (higher is better)", fontsize=11)
    thr.set_yticks(ys, labels)
    lat.barh(ys, [r.p50_ms for r in block], color=colors)
    lat.scatter([r.p99_ms for r in block], ys, marker="|", s=300, color="#c0392b", linewidths=2)
    lat.set_title(f"batch {batch_size}: latency ms (lower is better)", fontsize=11)
    p99 = Line2D([], [], marker="|", linestyle="none", color="#c0392b", markersize=12, markeredgewidth=2)
    lat.legend([Patch(color="#3b6fc4"), p99], ["P50", "P99"], loc="lower right", fontsize=9)
    for ax in (thr, lat):
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{padding:5px 12px;border-bottom:1px solid #ddd;text-align:right}
th{background:#f3f4f6;border-bottom:2px solid #bbb}
th:nth-child(-n+2),td:nth-child(-n+2){text-align:left}
tr.group td{border-top:2px solid #888}tr.base td{background:#f6f6f6;color:#555}
td.best{background:#d9f2dd;font-weight:600}td.unstable{color:#b35c00}
.note{color:#555;font-size:90%}dl{font-size:90%;display:grid;grid-template-columns:max-content auto;gap:2px 12px}
dt{font-weight:600}dd{margin:0}img{display:block;max-width:100%;margin:8px 0 16px}"""


def _table(rows: list[Any], baseline: str | None) -> str:
    best = best_cells(rows, baseline)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = []
    prev = None
    for i, r in enumerate(rows):
        classes = [c for c, on in (("group", prev is not None and r.batch_size != prev),
                                   ("base", r.target == baseline)) if on]  # fmt: skip
        prev = r.batch_size
        cells = []
        for j, text in enumerate(row_cells(r)):
            cls = "best" if (i, j) in best else "unstable" if COLUMNS[j] == "stable" and not r.stable else ""
            cells.append(
                f"<td class='{cls}'>{html.escape(text)}</td>" if cls else f"<td>{html.escape(text)}</td>"
            )
        attr = f" class='{' '.join(classes)}'" if classes else ""
        body.append(f"<tr{attr}>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _rounds_note(rounds: int) -> str:
    if rounds == 1:
        return "Targets were measured one at a time on the same machine, in one round."
    return (
        f"{rounds} rounds: each measured every target at every batch size once, one at a time, the order "
        "reversed on every other round; a row is the median round by inf/s, ratios are taken within each "
        "round and their median shown."
    )


def write_html(result: Any, path: Path) -> None:
    """Write the comparison (a CompareResult) as one HTML file with no external resources."""
    spec = result.spec
    # grouped by batch size, targets in the order they were measured
    rows = sorted(result.rows(), key=lambda r: r.batch_size)
    charts = "".join(
        f"<img alt='batch {b}: inferences/s and latency per target' "
        f"src='data:image/png;base64,{base64.b64encode(chart_png(rows, b, spec.baseline)).decode()}'>"
        for b in sorted({r.batch_size for r in rows})
    )
    legend = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in COLUMN_HELP)
    skipped = "".join(
        f"<li><b>{html.escape(o.label)}</b>: {html.escape(o.error or '')}</li>"
        for o in result.outcomes
        if o.error
    )
    described = "".join(
        f"<li><b>{html.escape(o.label)}</b>: {html.escape(', '.join(f'{k}={v}' for k, v in o.description.items() if k != 'target'))}</li>"
        for o in result.outcomes
    )
    base = html.escape(spec.baseline or "none")
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>servelab compare: {html.escape(spec.model)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>servelab compare: {html.escape(spec.model)}</h1>"
        f"<p class='note'>Closed loop, {spec.concurrency} concurrent requests, client batch sizes "
        f"{', '.join(map(str, spec.batch_sizes))}; windows of {spec.measurement_interval_ms} ms (at most "
        f"{spec.max_windows}); ratios against <b>{base}</b> at the same batch size. {_rounds_note(spec.rounds)}</p>"
        f"<section id='results'>{_table(rows, spec.baseline)}</section>"
        f"<p class='note'><span style='background:#d9f2dd;padding:0 4px'>Green</span>: best value at that batch "
        f"size among the compared targets; the baseline (<b>{base}</b>, grey) is the reference and is not "
        f"ranked.</p><dl>{legend}</dl>"
        f"<h2>Charts</h2><section id='charts'>{charts}</section><h2>Targets</h2><ul>{described}</ul>"
        + (f"<h2>Not measured</h2><ul>{skipped}</ul>" if skipped else "")
        + "</body></html>"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)
