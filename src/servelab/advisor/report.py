"""The select report, in Markdown (``select.md`` + chart PNGs beside it) and one self-contained HTML page.

Both say what was measured on which data, the selected configuration and its config.pbtxt, the decision
matrix with every row's verdict (why it lost), the in-process prune, the conversions and the charts.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from servelab.advisor.charts import curves_png, pareto_png
from servelab.advisor.select import SelectResult

__all__ = ["write_reports"]

MATRIX_COLUMNS = ("configuration", "kind", "max req/s in SLA", "P99 ms", "RSS MB", "accuracy drop", "score", "meets constraints", "verdict")
INPROCESS_COLUMNS = ("artefact", "one-row latency ms", "rows/s", "batch", "kept")
CONVERT_COLUMNS = ("model", "precision", "status", "parity", "reason")


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def matrix_rows(result: SelectResult) -> list[list[str]]:
    out = []
    for r in result.decision.rows:
        rate = _num(r.max_rate, ",.0f") if r.complete else f"< {r.search.probes[0].offered:,.0f}" if r.search.probes else "-"
        out.append([
            r.label + (" (selected)" if r is result.decision.winner else ""), r.kind, rate, _num(r.p99_ms, ".2f"),
            _num(r.rss_mb, ",.0f"), f"{r.accuracy_drop:.3g}", _num(r.score, ".3f"), "yes" if r.feasible else "no",
            r.verdict,
        ])  # fmt: skip
    return out


def inprocess_rows(result: SelectResult) -> list[list[str]]:
    kept = {a.model for a in result.survivors}
    return [
        [r.artefact.label, _num(r.latency_ms, ".3f"), _num(r.rows_per_s, ",.0f"), str(r.batch),
         "yes" if r.artefact.model in kept else f"no: {result.pruned.get(r.artefact.model, '')}"]
        for r in result.inprocess
    ]  # fmt: skip


def convert_rows(result: SelectResult) -> list[list[str]]:
    rows = []
    for a in result.converted.manifest.get("artefacts", []):
        parity = a.get("parity") or {}
        figures = "; ".join(
            f"{o['name']}: rel {o['max_rel_error']:.3g}" + (f", top-1 {o['top1_agreement']:.1%}" if o.get("top1_agreement") is not None else "")
            for o in parity.get("outputs", [])
        )
        rows.append([a["model"], a["precision"], a["status"], figures or "-", a.get("reason") or ""])
    return rows


def _summary(result: SelectResult) -> list[tuple[str, str]]:
    c = result.spec.constraints
    w = result.decision.winner
    limits = [f"P99 <= {c.sla_p99_ms:g} ms", f"throughput >= {c.min_throughput:,.0f} req/s"]
    if c.max_memory_mb is not None:
        limits.append(f"memory <= {c.max_memory_mb:,.0f} MB")
    if c.max_accuracy_drop is not None:
        limits.append(f"accuracy drop <= {c.max_accuracy_drop:g}")
    return [
        ("model", result.converted.name),
        ("input data", result.data_source),
        ("constraints", ", ".join(limits)),
        ("selected", f"{w.label}: up to {w.max_rate:,.0f} req/s with P99 <= {c.sla_p99_ms:g} ms "
                     f"(P99 {w.p99_ms:.2f} ms there)" if w and w.p99_ms is not None else "nothing meets every constraint"),
        ("highest rate with P99 under the SLA", f"{w.max_rate:,.0f} req/s ({w.front_door.upper()})" if w else "-"),
        *([("grid", result.grid_note)] if result.grid_note else []),
        ("search", f"{len(result.measured)} of {result.grid.size} grid points measured "
                   f"({result.fraction_measured:.0%}), {result.probes} load levels, {result.elapsed_s:,.0f} s"
                   + (" (exhaustive)" if result.spec.exhaustive else "")),
        ("weights", ", ".join(f"{k}={v:.2f}" for k, v in result.decision.weights.items())),
        ("written", str(result.config_path) if result.config_path else "no config (no candidate met the constraints)"),
    ]  # fmt: skip


def _md_table(columns: tuple[str, ...], rows: list[list[str]]) -> str:
    def esc(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _markdown(result: SelectResult, charts: dict[str, str]) -> str:
    parts = [f"# servelab select: {result.converted.name}", ""]
    parts += [f"- **{k}**: {v}" for k, v in _summary(result)]
    if result.config_text:
        parts += ["", "## Selected config.pbtxt", "", "```", result.config_text.rstrip(), "```"]
    parts += ["", "## Decision matrix", "", _md_table(MATRIX_COLUMNS, matrix_rows(result))]
    parts += ["", "## Search", ""] + [f"- {line}" for line in result.log]
    parts += ["", "## Runtimes in process (the prune)", "", _md_table(INPROCESS_COLUMNS, inprocess_rows(result))]
    parts += ["", "## Conversions and parity", "", _md_table(CONVERT_COLUMNS, convert_rows(result))]
    parts += ["", "## Charts", ""] + [f"![{alt}]({name})" for alt, name in charts.items()]
    return "\n".join(parts) + "\n"


_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1300px}
table{border-collapse:collapse;font-variant-numeric:tabular-nums;font-size:13px;margin-bottom:1.2em}
th,td{padding:4px 10px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
th{background:#f3f4f6;border-bottom:2px solid #bbb}tr.selected td{background:#d9f2dd;font-weight:600}
tr.reference td{color:#8a4b0f}tr.infeasible td{color:#777}dl{display:grid;grid-template-columns:max-content auto;gap:3px 14px}
dt{font-weight:600}dd{margin:0}pre{background:#f6f8fa;padding:10px;overflow:auto}img{display:block;max-width:100%;margin:8px 0 18px}"""


def _html_table(section: str, columns: tuple[str, ...], rows: list[list[str]], classes: list[str] | None = None) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for i, r in enumerate(rows):
        cls = f" class='{classes[i]}'" if classes and classes[i] else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>")
    return f"<section id='{section}'><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></section>"


def _row_classes(result: SelectResult) -> list[str]:
    out = []
    for r in result.decision.rows:
        out.append("selected" if r is result.decision.winner else "reference" if r.kind == "reference"
                   else "" if r.feasible else "infeasible")  # fmt: skip
    return out


def _html(result: SelectResult, pngs: dict[str, bytes]) -> str:
    title = f"servelab select: {html.escape(result.converted.name)}"
    summary = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in _summary(result))
    config = f"<h2>Selected config.pbtxt</h2><pre id='config'>{html.escape(result.config_text)}</pre>" if result.config_text else ""
    imgs = "".join(f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'>" for alt, png in pngs.items())
    log = "".join(f"<li>{html.escape(line)}</li>" for line in result.log)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{title}</h1><dl id='summary'>{summary}</dl>{config}"
        f"<h2>Decision matrix</h2>{_html_table('matrix', MATRIX_COLUMNS, matrix_rows(result), _row_classes(result))}"
        f"<h2>Charts</h2><section id='charts'>{imgs}</section>"
        f"<h2>Search</h2><ul id='search'>{log}</ul>"
        f"<h2>Runtimes in process (the prune)</h2>{_html_table('inprocess', INPROCESS_COLUMNS, inprocess_rows(result))}"
        f"<h2>Conversions and parity</h2>{_html_table('conversions', CONVERT_COLUMNS, convert_rows(result))}"
        "</body></html>"
    )


def write_reports(result: SelectResult, out_dir: Path) -> dict[str, Path]:
    """``select.md`` (+ PNGs) and ``select.html`` in ``out_dir``; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs = {
        "latency-throughput curves": curves_png(result.decision, result.spec.constraints.sla_p99_ms),
        "Pareto chart": pareto_png(result.decision),
    }
    names = {"latency-throughput curves": "select_curves.png", "Pareto chart": "select_pareto.png"}
    for alt, png in pngs.items():
        (out_dir / names[alt]).write_bytes(png)
    paths: dict[str, Any] = {"markdown": out_dir / "select.md", "html": out_dir / "select.html"}
    paths["markdown"].write_text(_markdown(result, names))
    paths["html"].write_text(_html(result, pngs))
    return paths
