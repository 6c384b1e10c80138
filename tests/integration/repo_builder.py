"""The test repository (kept for the tests that import it by this name): harness.repository."""

from __future__ import annotations

from harness.models import NUMERIC_DTYPES
from harness.repository import CLASS_LABELS, build_test_repository, echo_name

__all__ = ["CLASS_LABELS", "NUMERIC_DTYPES", "build_test_repository", "echo_name"]
