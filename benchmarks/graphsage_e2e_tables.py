"""The RESULTS.md sections benchmarks/graphsage_e2e.py writes, rendered from its JSON document.

``graphsage_e2e``: the published layout (batch-1 and batch-32 P50 / P99, nodes/s, ratios to real TorchServe
like for like) and the issue's bars; ``graphsage_engine``: the same models through servelab's Engine in
process against the TorchServe-style function. Rendering reads only the JSON document (plain dicts), so the
sections of a past run can be rebuilt from benchmarks/results/graphsage_e2e.json.
"""

from __future__ import annotations

import math
from typing import Any

from servelab.bench.results_md import markdown_table

E2E_SECTION = "graphsage_e2e"
ENGINE_SECTION = "graphsage_engine"
SECTIONS = (E2E_SECTION, ENGINE_SECTION)  # the sections of RESULTS.md graphsage_e2e.py writes
#: the row the issue's end-to-end bars are read from: the fused model on ONNX Runtime, over gRPC
BAR_FRAMEWORK = "servelab + ONNX Runtime (fused)"
#: (batch-1 P50 ms, batch-1 P99 ms, batch-32 P99 ms, nodes/s), end to end over gRPC
BARS = (1.0, 2.5, 6.0, 15_000.0)
TARGET_RATIO = 3.0
#: issue 14's GraphSAGE bar against the Triton python-backend pipeline, both over gRPC: sage_fused nodes/s
#: >= 2x Triton's, batch-1 P50 <= 0.5x Triton's
TRITON_NODES_RATIO, TRITON_P50_RATIO = 2.0, 0.5
#: GRAPHSAGE.md's published reference (not measured here), shown under the measured rows
PUBLISHED_A10 = ("*published: ONNX Runtime on an A10 GPU*", "", "*5.1 / 11.6*", "*2.8 / 7.3*", "*11,420 qps*", "",
                 "", "")  # fmt: skip


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None or math.isnan(value) else format(value, fmt)


def _pair(a: float, b: float, fmt: str = ".2f") -> str:
    return f"{_num(a, fmt)} / {_num(b, fmt)}"


def _e2e_table(rows: list[dict[str, Any]]) -> str:
    columns = ("framework", "protocol", "batch 1 P50 / P99 ms", "batch 32 P50 / P99 ms", "nodes/s",
               "sampling share", "x TorchServe P50 b1", "x TorchServe nodes/s")  # fmt: skip
    cells = [
        (r["framework"], r["protocol"], _pair(r["b1_p50_ms"], r["b1_p99_ms"]), _pair(r["b32_p50_ms"], r["b32_p99_ms"]),
         _num(r["nodes_per_s"], ",.0f"), _num(r["sample_share"], ".0%"), _num(r["vs_torchserve_b1_p50"], ".2f"),
         _num(r["vs_torchserve_nodes_per_s"], ".2f"))
        for r in rows
    ]  # fmt: skip
    return markdown_table(columns, [*cells, PUBLISHED_A10])


def _bars(rows: list[dict[str, Any]]) -> str:
    grpc = next((r for r in rows if r["framework"] == BAR_FRAMEWORK and r["protocol"] == "gRPC"), None)
    if grpc is None:
        return f"Issue bars: not measured (no `{BAR_FRAMEWORK}` gRPC row in this run).\n"
    p50, p99, p99_32, nodes = BARS
    got = (grpc["b1_p50_ms"], grpc["b1_p99_ms"], grpc["b32_p99_ms"], grpc["nodes_per_s"])
    met = got[0] <= p50 and got[1] <= p99 and got[2] <= p99_32 and got[3] >= nodes
    lines = [
        f"Issue bars, end to end over gRPC (`{BAR_FRAMEWORK}`): batch-1 P50 <= {p50:g} ms: **{got[0]:.2f} ms**; "
        f"P99 <= {p99:g} ms: **{got[1]:.2f} ms**; batch-32 P99 <= {p99_32:g} ms: **{got[2]:.2f} ms**; "
        f">= {nodes:,.0f} nodes/s: **{got[3]:,.0f}**: {'met' if met else 'NOT met'}."
    ]
    against = [r for r in rows if r["framework"] == BAR_FRAMEWORK and not math.isnan(r["vs_torchserve_b1_p50"])]
    if not against:
        lines.append("Against real TorchServe: not measured in this run (TorchServe's venv or Java missing).")
    for r in against:
        x_p50, x_nodes = r["vs_torchserve_b1_p50"], r["vs_torchserve_nodes_per_s"]
        verdict = "both >= 3x" if min(x_p50, x_nodes) >= TARGET_RATIO else "below 3x"
        lines.append(
            f"Against real TorchServe over {r['protocol']} (its {'gRPC' if r['protocol'] == 'gRPC' else 'REST'} "
            f"API): batch-1 P50 **{x_p50:.2f}x**, nodes/s **{x_nodes:.2f}x** ({verdict})."
        )
    return "".join(f"- {line}\n" for line in lines)


def _triton_line(doc: dict[str, Any]) -> str:
    """The bar against the Triton python-backend pipeline (``triton_bar`` of the document; a document of a
    run from before the Triton rows has no such key and gets no line)."""
    if "triton_bar" not in doc:
        return ""
    bar = doc["triton_bar"]
    if bar is None:
        return "- Against the Triton python-backend pipeline: not measured in this run (`--no-triton`, or a row missing).\n"
    cfg = doc["meta"].get("triton") or {}
    setup = f" ({cfg['instances']} instance(s), {cfg['layers_threads']} onnxruntime thread(s) each)" if cfg else ""
    (mine, peer), (mine_p50, peer_p50) = bar["nodes_per_s"], bar["b1_p50_ms"]
    return (
        f"- Against the Triton python-backend pipeline over gRPC{setup} (issue 14: nodes/s >= {TRITON_NODES_RATIO:g}x, "
        f"batch-1 P50 <= {TRITON_P50_RATIO:g}x): nodes/s {mine:,.0f} vs {peer:,.0f} = **{bar['nodes_ratio']:.2f}x**; "
        f"batch-1 P50 {mine_p50:.2f} vs {peer_p50:.2f} ms = **{bar['b1_p50_ratio']:.2f}x**: "
        f"{'met' if bar['met'] else 'NOT met'}.\n"
    )


def e2e_markdown(doc: dict[str, Any]) -> str:
    """The end-to-end section: every served row, the published reference, the issue's bars."""
    m = doc["meta"]
    load = m["load_avg_before"][0], m["load_avg_after"][0]
    head = (
        f"{m['nodes']:,} nodes, {m['queries']:,} query nodes; batch 1 and 32 at concurrency 1 (P50 / P99), nodes/s "
        f"with batch-32 requests {m['concurrency']} in flight, at most {m['duration_s_per_phase']:g} s per phase; "
        f"load average {load[0]:.2f} before, {load[1]:.2f} after.\n\n"
    )
    note = '\n"x TorchServe" compares like with like: gRPC rows with its gRPC API, REST rows with its REST API.\n\n'
    return head + _e2e_table(doc["e2e_rows"]) + note + _bars(doc["e2e_rows"]) + _triton_line(doc)


def engine_markdown(doc: dict[str, Any]) -> str:
    """The in-process section: servelab's Engine on ``sage`` / ``sage_fused`` against the Python function."""
    rows = doc["in_process"]
    if not rows:
        return "In-process rows not measured in this run (`--no-in-process`).\n"
    ratio = {c["servelab"]: c for c in doc["comparisons"] if c["scope"] == "in-process"}
    columns = ("config", "batch 1 P50 / P99 us", "batch 32 P50 / P99 us", "nodes/s (b32)", "x P50 b1",
               "x nodes/s", ">= 3x both")  # fmt: skip
    cells = []
    for r in rows:
        c = ratio.get(r["config"])
        cells.append((
            r["config"], _pair(r["b1_p50_ms"] * 1e3, r["b1_p99_ms"] * 1e3, ",.0f"),
            _pair(r["b32_p50_ms"] * 1e3, r["b32_p99_ms"] * 1e3, ",.0f"), _num(r["nodes_per_s"], ",.0f"),
            "1.00" if c is None else f"{c['b1_p50_ratio']:.2f}", "1.00" if c is None else f"{c['nodes_ratio']:.2f}",
            "-" if c is None else ("yes" if c["meets_3x"] else "no"),
        ))  # fmt: skip
    head = (
        "servelab's Engine in process on the exported models (validation, statistics and scheduling in the path), "
        "one caller, the same queries; ratios against the TorchServe-style function.\n\n"
    )
    return head + markdown_table(columns, cells)


def sections(doc: dict[str, Any]) -> dict[str, str]:
    """Section name -> markdown, for every section this benchmark writes."""
    return {E2E_SECTION: e2e_markdown(doc), ENGINE_SECTION: engine_markdown(doc)}
