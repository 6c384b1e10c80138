"""What the Engine adds over calling ONNX Runtime directly, measured in one run.

    python benchmarks/engine_overhead.py [--calls 20000] [--repo examples/repository]

For the example models `simple` (INT32 add/sub) and `mlp_onnx` at batch 1 and 32: the median and P99 of
``Engine.infer`` (validation, version lookup, statistics, output selection) against
``InferenceSession.run`` on the very same session object, interleaved in blocks so that both see the same
machine noise. The result is the per-call overhead in microseconds; the bar is <= 20 us at batch 1 (median).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from servelab import Engine

ROOT = Path(__file__).resolve().parent.parent
BLOCK = 500
RESULTS_MD = ROOT / "benchmarks" / "RESULTS.md"
SECTION = "engine_overhead"  # the section of RESULTS_MD this script writes
BAR_US = 20


def _inputs(name: str, batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    if name == "simple":
        x = rng.integers(0, 100, (batch, 16), dtype=np.int32)
        return {"INPUT0": x, "INPUT1": x}
    return {"INPUT": rng.standard_normal((batch, 16), dtype=np.float32)}


def measure(engine: Engine, name: str, batch: int, calls: int) -> dict[str, float]:
    inputs = _inputs(name, batch)
    versions = engine.dataplane.registry.serving(name)
    session = versions[max(versions)].instances[0].session  # the Engine's own session
    bare = np.empty(calls, dtype=np.int64)
    eng = np.empty(calls, dtype=np.int64)
    for _ in range(1000):  # warm both paths
        session.run(None, inputs)
        engine.infer(name, inputs)
    clock = time.perf_counter_ns
    done = 0
    while done < calls:
        n = min(BLOCK, calls - done)
        for i in range(done, done + n):
            t0 = clock()
            session.run(None, inputs)
            bare[i] = clock() - t0
        for i in range(done, done + n):
            t0 = clock()
            engine.infer(name, inputs)
            eng[i] = clock() - t0
        done += n
    b50, e50 = float(np.median(bare)) / 1e3, float(np.median(eng)) / 1e3
    return {
        "model": name,
        "batch": batch,
        "ort_p50_us": b50,
        "engine_p50_us": e50,
        "ort_p99_us": float(np.percentile(bare, 99)) / 1e3,
        "engine_p99_us": float(np.percentile(eng, 99)) / 1e3,
        "overhead_p50_us": e50 - b50,
        "ratio_p50": e50 / b50,
    }


def results_markdown(doc: dict[str, Any]) -> str:
    """This run's section of RESULTS.md, from the document written to JSON."""
    from servelab.bench.results_md import markdown_table

    columns = ("model", "batch", "ORT P50 us", "Engine P50 us", "overhead P50 us", "ORT P99 us", "Engine P99 us")
    keys = ("ort_p50_us", "engine_p50_us", "overhead_p50_us", "ort_p99_us", "engine_p99_us")
    rows = [(r["model"], r["batch"], *(f"{r[k]:.1f}" for k in keys)) for r in doc["rows"]]
    worst = max(r["overhead_p50_us"] for r in doc["rows"] if r["batch"] == 1)
    return (
        f"{doc['calls']:,} calls per row, the bare session and the Engine interleaved in blocks of {BLOCK}.\n\n"
        + markdown_table(columns, rows)
        + f"\n{doc['verdict']}: worst batch-1 median overhead {worst:.1f} us (bar {doc['bar_us']} us).\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repo", type=Path, default=ROOT / "examples" / "repository")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "engine_overhead.json")
    parser.add_argument("--results-md", type=Path, default=RESULTS_MD, help=f"rewrite its section {SECTION!r}")
    parser.add_argument("--no-results-md", dest="results_md", action="store_const", const=None)
    args = parser.parse_args()
    if not (args.repo / "simple").exists():
        sys.path.insert(0, str(ROOT / "examples"))
        from build_repository import build

        build(args.repo)
    rows = []
    with Engine(args.repo, load_models=["simple", "mlp_onnx"]) as engine:
        for name in ("simple", "mlp_onnx"):
            for batch in (1, 32):
                rows.append(measure(engine, name, batch, args.calls))
    table = Table(title="Engine.infer vs InferenceSession.run (same session, interleaved)")
    for col in ("model", "batch", "ORT P50 us", "Engine P50 us", "overhead P50 us", "ratio", "ORT P99", "Engine P99"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r["model"], str(r["batch"]), f"{r['ort_p50_us']:.1f}", f"{r['engine_p50_us']:.1f}",
            f"{r['overhead_p50_us']:.1f}", f"{r['ratio_p50']:.2f}x", f"{r['ort_p99_us']:.1f}", f"{r['engine_p99_us']:.1f}",
        )
    Console().print(table)
    worst = max(r["overhead_p50_us"] for r in rows if r["batch"] == 1)
    verdict = "PASS" if worst <= BAR_US else "FAIL"
    print(f"{verdict}: worst batch-1 median overhead {worst:.1f} us (bar: {BAR_US} us)")
    doc = {"calls": args.calls, "rows": rows, "bar_us": BAR_US, "verdict": verdict}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc, indent=2))
    if args.results_md is not None:
        from servelab.bench.results_md import write_section

        write_section(args.results_md, SECTION, results_markdown(doc))
        print(f"wrote section {SECTION!r} of {args.results_md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
