"""PNG plots (throughput vs P99 over the sweep, latency CDF) and a self-contained HTML report."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from servelab.bench.report import CSV_COLUMNS, level_row
from servelab.bench.results import SweepResult

__all__ = ["latency_cdf_png", "throughput_p99_png", "write_html"]


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")  # no pyplot: no global figure state
    return buf.getvalue()


def throughput_p99_png(sweeps: list[SweepResult]) -> bytes:
    """P99 latency against throughput, one line per target; client-limited points hollow."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for s in sweeps:
        xs = [lv.throughput_rps for lv in s.levels]
        ys = [lv.summary.histogram.percentile(99) * 1e3 for lv in s.levels]
        (line,) = ax.plot(xs, ys, marker="o", label=f"{s.kind} {s.target}")
        limited = [(x, y) for x, y, lv in zip(xs, ys, s.levels, strict=True) if lv.client_limited]
        if limited:
            lx, ly = [p[0] for p in limited], [p[1] for p in limited]
            ax.scatter(lx, ly, s=120, facecolors="none", edgecolors=line.get_color())
    ax.set_xlabel("throughput (requests/s)")
    ax.set_ylabel("P99 latency (ms)")
    ax.set_title("throughput vs P99 (hollow ring: client-limited)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def latency_cdf_png(sweeps: list[SweepResult]) -> bytes:
    """Latency CDF of every level, log-scaled latency axis."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for s in sweeps:
        for lv in s.levels:
            xs, ys = lv.summary.histogram.cdf()
            if xs.size:
                load = f"c={lv.level:g}" if lv.mode == "concurrency" else f"{lv.level:g}/s"
                ax.step(xs * 1e3, ys, where="post", label=f"{s.kind} {load}")
    ax.set_xscale("log")
    plain = FuncFormatter(lambda x, _pos: f"{x:g}")
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(plain)
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("latency CDF")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def _table_html(sweeps: list[SweepResult]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in CSV_COLUMNS)
    rows = []
    for s in sweeps:
        for lv in s.levels:
            row = level_row(s, lv)
            cls = ' class="limited"' if lv.client_limited else ""
            cells = "".join(
                f"<td>{'' if row[c] is None else html.escape(f'{row[c]:.3f}' if isinstance(row[c], float) else str(row[c]))}</td>"
                for c in CSV_COLUMNS
            )
            rows.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def write_html(sweeps: list[SweepResult], path: str | Path, title: str = "servelab bench") -> None:
    """One file: tables plus both plots inlined as base64 PNGs."""
    imgs = "".join(
        f'<img alt="{alt}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        for alt, png in (
            ("throughput vs P99", throughput_p99_png(sweeps)),
            ("latency CDF", latency_cdf_png(sweeps)),
        )
    )
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}tr.limited{background:#fdd}img{max-width:48%}"
    )
    doc = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>"
        "<p>Rows shaded red are client-limited: throughput within a factor 2 of the load generator's own "
        "ceiling against a null endpoint, so they measure the client, not the server.</p>"
        f"{_table_html(sweeps)}<div>{imgs}</div></body></html>"
    )
    Path(path).write_text(doc)
