"""The example models the serving benchmarks serve, built by examples/build_repository.py (a script, not a
package: loaded here by path)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

__all__ = ["simple_repository"]

BUILDER = Path(__file__).resolve().parents[1] / "examples" / "build_repository.py"


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_repository", BUILDER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def simple_repository(folder: Path) -> Path:
    """``folder`` (created; it must not exist) holding Triton's ``simple`` (ONNX INT32 [1,16] add/sub)."""
    folder.mkdir(parents=True)
    _builder().build_simple(folder)
    return folder
