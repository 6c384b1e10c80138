"""The report's charts as PNG bytes: latency-throughput curves per candidate and the Pareto chart."""

from __future__ import annotations

import io

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from servelab.advisor.matrix import Decision, Row

__all__ = ["curves_png", "pareto_png"]

WINNER_RGB = "#1a7f37"
FRONT_RGB = "#3b6fc4"
OTHER_RGB = "#9aa5b1"
REFERENCE_RGB = "#c06014"


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return buf.getvalue()


def _thousands(ax: object) -> None:
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _p: f"{x:,.0f}"))  # type: ignore[attr-defined]


def curves_png(decision: Decision, sla_p99_ms: float) -> bytes:
    """P99 against served throughput for every probe of each row (one line per row), the SLA dashed."""
    fig = Figure(figsize=(10, 5.5))
    ax = fig.subplots()
    for row in decision.rows:
        probes = [p for p in row.search.probes if p.achieved_rps > 0 and p.p99_ms < float("inf")]
        # rate probes by offered load, then the closed-loop capacity run: the curve as load rises
        ordered = sorted((p for p in probes if p.mode == "request_rate"), key=lambda p: p.offered)
        points = [(p.achieved_rps, p.p99_ms) for p in ordered + [p for p in probes if p.mode != "request_rate"]]
        if not points:
            continue
        style = {"color": WINNER_RGB, "linewidth": 2.5, "zorder": 3} if row is decision.winner else {"alpha": 0.75}
        marker = "D" if row.kind == "reference" else "o"
        ax.plot([x for x, _ in points], [y for _, y in points], marker=marker, markersize=4, label=row.label, **style)
    ax.axhline(sla_p99_ms, color="#c0392b", linestyle="--", linewidth=1.2, label=f"SLA: P99 {sla_p99_ms:g} ms")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _p: f"{y:g}"))
    _thousands(ax)
    ax.set_xlabel("served throughput (requests/s)")
    ax.set_ylabel("P99 latency (ms, log scale)")
    ax.set_title("latency-throughput curve of each measured configuration")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(fig)


def _colour(row: Row, decision: Decision) -> str:
    if row is decision.winner:
        return WINNER_RGB
    if row.kind == "reference":
        return REFERENCE_RGB
    return FRONT_RGB if row in decision.front else OTHER_RGB


def pareto_png(decision: Decision) -> bytes:
    """Highest rate within the SLA against server memory; the Pareto front joined, the winner starred."""
    fig = Figure(figsize=(9, 5))
    ax = fig.subplots()
    rows = [r for r in decision.rows if r.max_rate > 0 and r.rss_mb is not None]
    for r in rows:
        assert r.rss_mb is not None
        marker = "*" if r is decision.winner else "D" if r.kind == "reference" else "o"
        ax.scatter(r.max_rate, r.rss_mb, s=260 if marker == "*" else 60, marker=marker, color=_colour(r, decision), zorder=3)
        ax.annotate(r.label, (r.max_rate, r.rss_mb), fontsize=7, xytext=(4, 4), textcoords="offset points")
    front = sorted((r for r in decision.front if r.rss_mb is not None), key=lambda r: r.max_rate)
    if len(front) > 1:
        ax.plot([r.max_rate for r in front], [r.rss_mb or 0.0 for r in front], color=FRONT_RGB, linewidth=1.5, zorder=2,
                label="Pareto front (throughput, P99, memory)")  # fmt: skip
        ax.legend(fontsize=8, loc="lower right")
    _thousands(ax)
    ax.set_xlabel("highest rate within the SLA (requests/s, higher is better)")
    ax.set_ylabel("server memory, RSS (MB, lower is better)")
    ax.set_title("Pareto chart: green star = selected, blue = on the front, orange = peer reference")
    ax.grid(True, alpha=0.3)
    return _png(fig)
