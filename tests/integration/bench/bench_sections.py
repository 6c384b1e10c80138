"""Which sections of benchmarks/RESULTS.md the Makefile's ``bench`` steps write, and what they write.

Run as a program (``python bench_sections.py ROOT``) in its own process, because it imports the benchmark
scripts (torch, numba, grpc, and grpc's start-up settings); prints one JSON document: per bench step, the
sections it declares and each one rendered by the script's own function from the step's committed JSON
(``null`` where that JSON does not exist yet). The test beside it compares that with RESULTS.md.
"""

from __future__ import annotations

import importlib
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any


def bench_steps(makefile: str) -> list[list[str]]:
    """The command lines (as words) of the ``bench`` target's recipe."""
    match = re.search(r"^bench:.*\n((?:\t.*\n?)+)", makefile, re.MULTILINE)
    if match is None:
        raise ValueError("the Makefile has no `bench:` target with a recipe")
    return [shlex.split(line.strip()) for line in match.group(1).splitlines() if line.strip()]


def _option(words: list[str], name: str, default: str | None = None) -> str | None:
    return words[words.index(name) + 1] if name in words else default


def _script_sections(root: Path, stem: str) -> dict[str, Any]:
    module = importlib.import_module(stem)
    doc_path = root / "benchmarks" / "results" / f"{stem}.json"
    doc = json.loads(doc_path.read_text()) if doc_path.is_file() else None
    if hasattr(module, "results_sections"):
        if doc is None:
            raise ValueError(f"benchmarks/{stem}.py declares its sections by rendering, but {doc_path} is missing")
        return dict(module.results_sections(doc))
    name = module.SECTION
    return {name: None if doc is None else module.results_markdown(doc)}


def _compare_sections(root: Path, words: list[str]) -> dict[str, Any]:
    from servelab.cli.compare import results_markdown

    name = _option(words, "--results-section", "compare")
    output = _option(words, "--output")
    doc_path = root / output if output else None
    doc = json.loads(doc_path.read_text()) if doc_path is not None and doc_path.is_file() else None
    return {name: None if doc is None else results_markdown(doc)}


def collect(root: Path) -> dict[str, Any]:
    """{"steps": [{"step", "results_md", "sections": {name: markdown | None}}]} for every bench step."""
    sys.path.insert(0, str(root / "benchmarks"))
    steps = []
    for words in bench_steps((root / "Makefile").read_text()):
        scripts = [w for w in words if re.fullmatch(r"benchmarks/\w+\.py", w)]
        if scripts:
            stem = Path(scripts[0]).stem
            steps.append({"step": scripts[0], "results_md": _option(words, "--results-md"),
                          "no_results_md": "--no-results-md" in words,
                          "sections": _script_sections(root, stem)})  # fmt: skip
        elif "compare" in words and any(w.endswith("servelab") for w in words):
            steps.append({"step": "servelab compare", "results_md": _option(words, "--results-md"),
                          "no_results_md": _option(words, "--results-md") is None,
                          "sections": _compare_sections(root, words)})  # fmt: skip
    return {"steps": steps}


if __name__ == "__main__":
    print(json.dumps(collect(Path(sys.argv[1]).resolve())))
