"""benchmarks/RESULTS.md is written by the scripts `make bench` runs: every table sits in a marked section,
every section is written by a bench step, and each holds what its script renders from its committed JSON
(so a table copied or edited by hand, or a JSON re-measured without its section, fails here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from servelab.bench.results_md import read_section, section_names

ROOT = Path(__file__).resolve().parents[3]
RESULTS_MD = ROOT / "benchmarks" / "RESULTS.md"
HELPER = Path(__file__).with_name("bench_sections.py")
PLACEHOLDER = "Not measured yet"


@pytest.fixture(scope="module")
def steps() -> list[dict[str, Any]]:
    """The bench steps and what each renders (in a child process: it imports every benchmark script)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(HELPER), str(ROOT)], capture_output=True, text=True, env=env,
                          timeout=300, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)["steps"]


def _written(steps: list[dict[str, Any]]) -> dict[str, tuple[str, str | None]]:
    """Section name -> (the step that writes it, its markdown from the committed JSON or None)."""
    out: dict[str, tuple[str, str | None]] = {}
    for step in steps:
        for name, markdown in step["sections"].items():
            assert name not in out, f"section {name!r} is written by {out[name][0]} and by {step['step']}"
            out[name] = (step["step"], markdown)
    return out


def test_every_table_is_inside_a_marked_section() -> None:
    inside, outside = None, []
    for number, line in enumerate(RESULTS_MD.read_text().splitlines(), 1):
        if line.startswith("<!-- BEGIN "):
            assert inside is None, f"line {number}: a section opens inside section {inside!r}"
            inside = line.split()[2]
        elif line.startswith("<!-- END "):
            assert line.split()[2] == inside, f"line {number}: {line!r} closes {inside!r}"
            inside = None
        elif line.lstrip().startswith("|") and inside is None:
            outside.append(f"{number}: {line[:80]}")
    assert inside is None, f"section {inside!r} is never closed"
    assert not outside, "table lines outside any marked section:\n" + "\n".join(outside)


def test_every_section_is_written_by_a_bench_step(steps: list[dict[str, Any]]) -> None:
    written = _written(steps)
    present = section_names(RESULTS_MD.read_text())
    assert len(present) == len(set(present)), f"a section appears twice: {present}"
    assert sorted(present) == sorted(written), (
        f"in RESULTS.md but written by no bench step: {sorted(set(present) - set(written))}; "
        f"written by a step but missing from RESULTS.md: {sorted(set(written) - set(present))}"
    )


def test_every_bench_step_writes_benchmarks_results_md(steps: list[dict[str, Any]]) -> None:
    for step in steps:
        assert step["sections"], f"{step['step']} writes no section of RESULTS.md"
        assert not step["no_results_md"], f"{step['step']} does not write RESULTS.md in the Makefile"
        assert step["results_md"] in (None, "benchmarks/RESULTS.md"), step


def test_each_section_is_what_its_script_renders_from_its_json(steps: list[dict[str, Any]]) -> None:
    for name, (step, markdown) in _written(steps).items():
        body = read_section(RESULTS_MD, name)
        assert body is not None
        if markdown is None:  # never measured: the placeholder until `make bench` runs
            assert body.startswith(PLACEHOLDER), f"{name}: no JSON from {step}, so the section must say so"
        else:
            assert body == markdown.strip("\n") + "\n", (
                f"section {name!r} differs from what {step} renders from its JSON: rerun it, never edit by hand"
            )
