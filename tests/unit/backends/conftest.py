"""The MLP exported once per format for the backend tests (harness.backends.export_mlp):
``onnx_dir``, ``ir_dir``, ``script_dir`` and ``program_dir`` are its version folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.backends import export_mlp


def _exported(fmt: str) -> Any:
    @pytest.fixture(scope="session")
    def version_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
        folder = tmp_path_factory.mktemp(fmt) / "1"
        export_mlp(fmt, folder)
        return folder

    version_dir.__doc__ = f"The MLP as {fmt}, in its version folder."
    return version_dir


onnx_dir = _exported("onnx")
ir_dir = _exported("openvino")
script_dir = _exported("torchscript")
program_dir = _exported("torch_export")
