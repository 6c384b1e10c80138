"""ONNX -> an OpenVINO model through OpenVINO's own converter, without its process-wide side effects.

``openvino.convert_model`` does two things to the calling process that servelab does not accept:

- It sends usage telemetry (Google Analytics) unless declined, forking the whole calling process once per
  event from a thread pool; servelab makes no network calls at run time. The converter's own switch is
  used: it declines telemetry when ``CI=true`` (set for the call only). NNCF's telemetry is declined the
  same way (``NNCF_CI``, read when ``nncf`` is first imported: import it inside :func:`quiet_openvino`).
- With ``--verbose`` anywhere in ``sys.argv`` (any program's flag, not only OpenVINO's) it starts
  ``tracemalloc``, and stops it only when the conversion succeeds. After a failed attempt (a tree
  ensemble has no OpenVINO form) every allocation of the process stayed traced: measured, the load
  generator of ``benchmarks/select_vs_exhaustive.py --verbose`` then drove REST 3x slower (2,400 against
  8,000 requests/s) for the rest of the run, and a one-row ONNX Runtime call took 22 us instead of 7.
  Stopped here when it was not tracing before the call.
"""

from __future__ import annotations

import contextlib
import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["convert_onnx", "quiet_openvino"]

#: the variables OpenVINO's converter (``CI``) and NNCF (``NNCF_CI``) read to decline telemetry
_NO_TELEMETRY = {"CI": "true", "NNCF_CI": "1"}


@contextlib.contextmanager
def quiet_openvino() -> Iterator[None]:
    """Within: OpenVINO's converter and NNCF send no telemetry, and a ``tracemalloc`` they start is stopped
    on the way out (whether the conversion succeeded or not)."""
    was_tracing = tracemalloc.is_tracing()
    saved = {k: os.environ.get(k) for k in _NO_TELEMETRY}
    os.environ.update(_NO_TELEMETRY)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if not was_tracing and tracemalloc.is_tracing():
            tracemalloc.stop()


def convert_onnx(onnx_path: str | Path) -> Any:
    """``openvino.convert_model`` of an ONNX file, inside :func:`quiet_openvino`: an ``openvino.Model``."""
    import openvino as ov

    with quiet_openvino():
        return ov.convert_model(str(onnx_path))
