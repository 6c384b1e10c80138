"""What ``servelab convert SOURCE`` starts from, loaded into one shape: inputs, outputs, and a reference.

A SOURCE is a TorchScript file (``.pt``/``.ts``), a ``torch.export`` program (``.pt2``), a Python file
exposing a module factory (``model.py`` or ``model.py:make_model``), an ONNX file, or a scikit-learn /
LightGBM / XGBoost model (a pickle or joblib file of the estimator; LightGBM's text model ``.txt``;
XGBoost's ``.json``/``.ubj``). The *reference* is the source run as it is (eager torch, ONNX Runtime on
the original file, the estimator's own ``predict``): every artefact is checked against it.

Most models batch: the first axis of every input and output is the batch. A model whose inputs have
leading dimensions of their own (GraphSAGE layers: x [n_all, F], nbr1 [n1, k], nbr2 [B, k]) does not: its
Python file says ``max_batch_size = 0`` (and may give ``dynamic_axes``), or ``--max-batch-size 0`` says
so for any source; it is then served with ``max_batch_size: 0`` and fed whole requests.

Pickles run code when loaded: give convert only files you would import.

:func:`load_source` picks the loader by the file's suffix: torch kinds in :mod:`servelab.convert.torch_sources`,
tabular ones in :mod:`servelab.convert.tabular_sources`, ONNX (a session on the file) here; all return the
:class:`~servelab.convert.source_types.Source` shape, re-exported here with :class:`TensorInfo`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from servelab.convert.source_types import TABULAR_KINDS, TORCH_KINDS, Source, SourceKind, Task, TensorInfo
from servelab.convert.tabular_sources import load_tabular
from servelab.convert.torch_sources import load_program, load_python, load_torchscript
from servelab.errors import InvalidArgument
from servelab.types import DataType

__all__ = ["TABULAR_KINDS", "TORCH_KINDS", "Source", "SourceKind", "Task", "TensorInfo", "load_source", "parse_input_option"]


def parse_input_option(text: str) -> TensorInfo:
    """``NAME:DTYPE:d1,d2`` (dims without the batch axis; DTYPE like FP32 or INT64) as a batched TensorInfo."""
    parts = text.split(":")
    if len(parts) != 3 or not parts[0]:
        raise InvalidArgument(f"--input {text!r}: expected NAME:DTYPE:d1,d2 (e.g. x:FP32:16)")
    name, dtype, dims = parts
    try:
        parsed = DataType.parse(dtype.upper().removeprefix("TYPE_"))
        shape = tuple(int(d) for d in dims.split(",") if d.strip())
    except (ValueError, InvalidArgument):
        raise InvalidArgument(
            f"--input {text!r}: DTYPE must be an OIP datatype (FP32, INT64, ...) and dims whole numbers"
        ) from None
    return TensorInfo(name, parsed, (-1, *shape))


def _load_onnx(path: Path, task: Task) -> Source:
    import onnxruntime as ort

    from servelab.backends.onnxruntime import onnx_specs

    specs, outs = onnx_specs(path)
    inputs = [TensorInfo(s.name, s.dtype, s.shape) for s in specs]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in outs]

    def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(a) for a in session.run(names, feed)]

    return Source("onnx", path, inputs, names, task, _run=run)


def load_source(
    source: str,
    inputs: list[TensorInfo] | None = None,
    output_names: list[str] | None = None,
    task: Task = "other",
) -> Source:
    """Load SOURCE (see the module docstring); ``inputs`` are needed for TorchScript files."""
    text, _, factory = source.partition(".py:")
    path = Path(text + ".py") if factory else Path(source)
    if not path.exists():
        raise InvalidArgument(f"source {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".py":
        return load_python(path, factory or "make_model", inputs, output_names, task)
    if suffix in (".pt", ".ts", ".torchscript"):
        return load_torchscript(path, inputs, output_names, task)
    if suffix == ".pt2":
        return load_program(path, inputs, output_names, task)
    if suffix == ".onnx":
        return _load_onnx(path, task)
    if suffix in (".pkl", ".pickle", ".joblib", ".txt", ".json", ".ubj"):
        return load_tabular(path)
    raise InvalidArgument(
        f"source {path}: unknown kind {suffix!r}; expected .pt (TorchScript), .pt2 (torch.export), .py (a module "
        "factory), .onnx, or a scikit-learn/LightGBM/XGBoost model (.pkl/.joblib, LightGBM .txt, XGBoost .json/.ubj)"
    )
