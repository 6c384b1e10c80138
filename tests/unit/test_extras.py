"""The bench extra: what servelab.cli._extras checks matches pyproject.toml, and the server needs none of it.

That `servelab bench` without it names the extra: tests/integration/test_server_footprint.py, in a fresh venv.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from servelab.cli._extras import EXTRA_MODULES

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~\[;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_checked_modules_are_the_bench_extra() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert set(EXTRA_MODULES) <= set(extras)
    for extra, modules in EXTRA_MODULES.items():
        assert set(modules) == _names(extras[extra])  # distribution and module names agree for these


def test_the_server_dependencies_hold_nothing_of_the_bench_extra() -> None:
    core = _names(PYPROJECT["project"]["dependencies"])
    assert core.isdisjoint(EXTRA_MODULES["bench"])

