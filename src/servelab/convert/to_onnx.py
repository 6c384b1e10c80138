"""Any source to one ONNX file, trying opsets from the newest down until export and an ONNX Runtime load
both succeed; the result says which opset it used and why the newer ones failed.

Torch sources go through torch.onnx (dynamic axes from the user, or axis 0 of every input and output);
scikit-learn through skl2onnx, LightGBM and XGBoost through onnxmltools; an ONNX source is copied.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from servelab.convert.source_types import TABULAR_KINDS, Source
from servelab.errors import InvalidArgument, Unsupported

__all__ = ["NEWEST_OPSET", "OLDEST_OPSET", "OnnxExport", "export_source_onnx", "parse_dynamic_axes"]

#: the newest default-domain opset tried first (capped by what the installed onnx and ORT know)
NEWEST_OPSET = 23
OLDEST_OPSET = 11
#: ai.onnx.ml opset for tree ensembles and the other classic-ML operators
_ML_OPSET = 3


@dataclass
class OnnxExport:
    """Where the ONNX file went, the opset that worked, and what each newer opset said."""

    path: Path
    opset: int
    tried: list[tuple[int, str]] = field(default_factory=list)

    def describe(self) -> str:
        groups: list[tuple[list[int], str]] = []
        for opset, text in self.tried:  # consecutive opsets with the same reason say it once
            why = text.replace(str(opset), "N")
            if groups and groups[-1][1] == why:
                groups[-1][0].append(opset)
            else:
                groups.append(([opset], why))
        failed = "; ".join(
            (f"opsets {o[0]}-{o[-1]}" if len(o) > 1 else f"opset {o[0]}") + f": {why}" for o, why in groups
        )
        return f"opset {self.opset}" + (f" (newer opsets failed: {failed})" if failed else "")


def parse_dynamic_axes(items: list[str]) -> dict[str, dict[int, str]]:
    """``NAME:0,1`` options -> {name: {axis: "NAME_axisN"}} (torch.onnx's dynamic_axes)."""
    out: dict[str, dict[int, str]] = {}
    for item in items:
        name, sep, axes = item.rpartition(":")
        try:
            parsed = [int(a) for a in axes.split(",") if a.strip()]
        except ValueError:
            parsed = []
        if not sep or not name or not parsed:
            raise InvalidArgument(f"--dynamic-axes {item!r}: expected NAME:axis,axis (e.g. tokens:0,1)")
        out[name] = {a: "batch" if a == 0 else f"{name}_axis{a}" for a in parsed}
    return out


def _ort_loads(path: Path) -> None:
    import onnxruntime as ort

    ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _newest(limit: int | None) -> int:
    return min(limit or NEWEST_OPSET, onnx.defs.onnx_opset_version())


def _first_working(
    write: Callable[[int], None], path: Path, newest: int, oldest: int = OLDEST_OPSET
) -> OnnxExport:
    tried: list[tuple[int, str]] = []
    for opset in range(newest, oldest - 1, -1):
        try:
            write(opset)
            _ort_loads(path)
        except Exception as exc:  # each opset's failure is reported, the next one tried
            tried.append((opset, _short(exc)))
            continue
        return OnnxExport(path, opset, tried)
    detail = "; ".join(f"opset {o}: {why}" for o, why in tried[-3:])
    raise Unsupported(f"no opset from {newest} down to {oldest} exported and loaded in ONNX Runtime ({detail})")


def _short(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]


def _torch_writer(source: Source, path: Path, dynamic_axes: dict[str, dict[int, str]] | None) -> Callable[[int], None]:
    import torch

    if source.examples is not None:  # the file's own request (a model that does not batch)
        examples = tuple(torch.from_numpy(np.ascontiguousarray(e)) for e in source.examples)
    else:
        examples = tuple(torch.from_numpy(_example(t, 2)) for t in source.inputs)
    names = [t.name for t in source.inputs]
    if dynamic_axes is None:
        dynamic_axes = {n: {0: "batch"} for n in [*names, *source.output_names]}

    def write(opset: int) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                source.module, examples, str(path), input_names=names, output_names=list(source.output_names),
                dynamic_axes=dynamic_axes, opset_version=opset, dynamo=False,
            )  # fmt: skip

    return write


def _example(info: Any, batch: int) -> Any:
    shape = [batch if i == 0 and d < 0 else (1 if d < 0 else d) for i, d in enumerate(info.shape)]
    dtype = info.dtype.numpy_dtype
    if dtype.kind == "f":
        return np.random.default_rng(0).standard_normal(shape).astype(dtype)
    return np.zeros(shape, dtype=dtype)


def _tabular_writer(source: Source, path: Path) -> Callable[[int], None]:
    features = source.inputs[0].shape[1]

    def write(opset: int) -> None:
        model = _tabular_model(source, features, opset)
        onnx.save(model, str(path))

    return write


def _tabular_model(source: Source, features: int, opset: int) -> onnx.ModelProto:
    est = source.estimator
    if source.kind == "sklearn":
        from skl2onnx import to_onnx
        from skl2onnx.common.data_types import FloatTensorType as SkFloat

        options = {id(est): {"zipmap": False}} if source.task == "classifier" else None
        return to_onnx(
            est, initial_types=[("input", SkFloat([None, features]))], options=options,
            target_opset={"": opset, "ai.onnx.ml": _ML_OPSET},
        )  # fmt: skip
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType

    types = [("input", FloatTensorType([None, features]))]
    if source.kind == "lightgbm":
        return onnxmltools.convert_lightgbm(est, initial_types=types, target_opset=opset, zipmap=False)
    return onnxmltools.convert_xgboost(est, initial_types=types, target_opset=opset)


def export_source_onnx(
    source: Source, path: Path, dynamic_axes: dict[str, dict[int, str]] | None = None, newest: int | None = None
) -> OnnxExport:
    """Write ``source`` as ONNX at ``path`` with the newest opset that exports and loads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if source.kind == "onnx":
        if source.path.resolve() != path.resolve():
            shutil.copyfile(source.path, path)
        opset = next((o.version for o in onnx.load(str(path), load_external_data=False).opset_import
                      if o.domain in ("", "ai.onnx")), 0)  # fmt: skip
        return OnnxExport(path, opset)
    if source.kind in TABULAR_KINDS:
        return _first_working(_tabular_writer(source, path), path, _newest(newest))
    if source.is_torch:
        return _first_working(_torch_writer(source, path, dynamic_axes), path, _newest(newest))
    raise Unsupported(f"cannot export a {source.kind} source to ONNX")
