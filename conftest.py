"""pytest's rootdir conftest: puts tests/ on ``sys.path`` so that every test imports the one shared
harness as ``harness`` (tests/harness: models, repository, data, gates, servers, clients)."""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent / "tests")
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
