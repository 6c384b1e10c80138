"""``ident``, the labelled identity model of the trust-boundary tests (in process and over the wire): FP32
[batch, 4] x -> y on onnxruntime, y's classes named by labels.txt. Its ONNX bytes go in uploads, its full
JSON config (:func:`ident_override`) in load requests, and :func:`ident_model` writes the folder."""

from __future__ import annotations

from pathlib import Path

from harness.models import XY, unary_onnx_bytes
from harness.repository import write_config

__all__ = ["IDENT_CONFIG", "LABELS", "ident_model", "ident_onnx_bytes", "ident_override"]

#: the classes of y (labels.txt)
LABELS = ["a", "b", "c", "d"]
#: config.pbtxt of the model (no name: the folder names it)
IDENT_CONFIG = """\
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "x", data_type: TYPE_FP32, dims: [4] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [4], label_filename: "labels.txt" } ]
"""


def ident_onnx_bytes() -> bytes:
    """model.onnx of the model: FP32 [batch, 4] Identity x -> y."""
    return unary_onnx_bytes(io=XY)


def ident_override(**fields: object) -> dict[str, object]:
    """A complete ModelConfig (JSON form) of the model, without labels, with ``fields`` replaced."""
    config: dict[str, object] = {
        "backend": "onnxruntime",
        "max_batch_size": 4,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [4]}],
    }
    config.update(fields)
    return config


def ident_model(repo: Path, name: str = "ident", labels: list[str] = LABELS) -> Path:
    """``<repo>/<name>``: 1/model.onnx, config.pbtxt and labels.txt; returns the folder."""
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.onnx").write_bytes(ident_onnx_bytes())
    write_config(d, IDENT_CONFIG)
    (d / "labels.txt").write_text("\n".join(labels) + "\n")
    return d
