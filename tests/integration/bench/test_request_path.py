"""benchmarks/request_path.py: a real short run (both modes, add_sub built from examples/triton_models, the
REST app called in a fresh process per mode) gives every cell from real answers, and its section shows the
median round of each cell with the worker's CPU only where a worker runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.bench_scripts import BENCHMARKS, import_benchmark

ROOT = BENCHMARKS.parent


def test_a_short_run_measures_both_modes_and_renders_its_section(tmp_path: Path) -> None:
    out = tmp_path / "request_path.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "request_path.py"), "--requests", "300", "--rounds", "2", "--gap-us", "100",
         "--no-results-md", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    cells = {(r["round"], r["mode"], r["kind"]) for r in doc["rows"]}
    assert cells == {(rnd, m, k) for rnd in (0, 1) for m in ("inline", "process") for k in ("busy", "gap")}
    for row in doc["rows"]:
        assert row["wall_us"] > 0 and row["user_us"] + row["sys_us"] > 0, row
    process_busy = [r for r in doc["rows"] if r["mode"] == "process" and r["kind"] == "busy"]
    # the model ran in the worker process; psutil reads its CPU in 10 ms ticks, so 300 requests (~100 ms of the
    # worker's CPU) rather than 60, where a cell read 0 or 2-3 ticks (333-500 us per request) on a slow machine
    assert all(r["worker_us"] > 0 for r in process_busy)
    inline_busy = [r for r in doc["rows"] if r["mode"] == "inline" and r["kind"] == "busy"]
    assert all(abs(r["x_wall"] - 1.0) < 1e-9 for r in inline_busy)  # the baseline of its own round

    markdown = import_benchmark("request_path").results_markdown(doc)
    lines = [line for line in markdown.splitlines() if line.startswith("| inline") or line.startswith("| process")]
    assert [line.split(" | ")[:2] for line in lines] == [["| inline", "busy"], ["| inline", "gap"],
                                                         ["| process", "busy"], ["| process", "gap"]]  # fmt: skip
    assert all(line.split(" | ")[5] == "-" for line in lines[:2])
    assert all(line.split(" | ")[5] != "-" for line in lines[2:])


def test_the_median_round_is_kept_with_every_round_beside_it() -> None:
    request_path = import_benchmark("request_path")
    rows = [{"round": i, "mode": "inline", "kind": "busy", "wall_us": w, "user_us": 1.0, "sys_us": 0.0,
             "worker_us": 0.0, "x_wall": 1.0, "x_cpu": 1.0} for i, w in enumerate([300.0, 100.0, 200.0])]  # fmt: skip
    (median,) = request_path.median_rows(rows)
    assert median["round"] == 2 and median["rounds_wall_us"] == [100.0, 200.0, 300.0]
