"""Make one artefact (target x precision) from a loaded source, in a scratch folder.

Each maker returns the files of the model's version folder, the parameters its config needs, or
``None`` with the reason the model cannot take that precision on that runtime (nothing to quantise,
no such kernels, a runtime that is not installed).
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from servelab.backends.parameters import ModelParameters, OpenVinoParameters
from servelab.convert import quantize
from servelab.convert.source_types import Source
from servelab.errors import Unsupported

__all__ = ["TARGETS", "Made", "MakeContext", "make_artefact"]

TARGETS: tuple[str, ...] = ("onnx", "openvino", "torchscript", "torch_export", "tensorrt")
Feed = dict[str, np.ndarray]


@dataclass
class MakeContext:
    """What every maker may use: the source, its fp32 ONNX file (when there is one), calibration samples."""

    source: Source
    work: Path
    onnx_fp32: Path | None
    calibration: list[Feed] = field(default_factory=list)
    max_batch_size: int = 32

    @property
    def batched(self) -> bool:
        """False for a model that does not batch: its calibration samples are whole requests."""
        return self.max_batch_size > 0


@dataclass
class Made:
    """A made artefact: the files for its version folder and its config parameters; or why it was not made."""

    files: list[Path] = field(default_factory=list)
    parameters: list[ModelParameters] = field(default_factory=list)
    skipped: str | None = None
    note: str = ""


def _need_onnx(ctx: MakeContext) -> Path:
    if ctx.onnx_fp32 is None:
        raise Unsupported("needs the ONNX export, which failed")
    return ctx.onnx_fp32


def _onnx(ctx: MakeContext, precision: str, out: Path) -> Made:
    src = _need_onnx(ctx)
    dst = out / "model.onnx"
    if precision == "fp32":
        shutil.copyfile(src, dst)
        return Made([dst])
    if precision == "fp16":
        ok = quantize.onnx_fp16(src, dst)
        return Made([dst]) if ok else Made(skipped="no operator of this model runs in fp16 on ONNX Runtime")
    if precision == "int8":
        ok = quantize.onnx_int8_dynamic(src, dst)
        return Made([dst]) if ok else Made(skipped="nothing in this model takes int8 (no MatMul/Gemm/Conv weights)")
    ok = quantize.onnx_int8_static(src, dst, ctx.calibration, ctx.batched)
    note = _calibration_note(ctx)
    return Made([dst], note=note) if ok else Made(skipped="nothing in this model takes int8 (no quantisable operators)")


def _calibration_note(ctx: MakeContext) -> str:
    n = len(ctx.calibration)
    if n < quantize.MIN_CALIBRATION_SAMPLES:
        return f"calibrated on {n} samples (fewer than {quantize.MIN_CALIBRATION_SAMPLES}: ranges may be too narrow)"
    return f"calibrated on {n} samples"


def _telling_line(text: str) -> str:
    """The line of a runtime's multi-line error that names the problem (e.g. the unsupported operators)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    keys = ("conversion rule", "not supported", "unsupported", "no ")
    line = next((ln for ln in lines if any(k in ln.lower() for k in keys)), lines[-1] if lines else "unknown error")
    return line[:240]


def _openvino_has_fp16() -> bool:
    import openvino as ov

    return "FP16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def _openvino(ctx: MakeContext, precision: str, out: Path) -> Made:
    src = _need_onnx(ctx)
    xml = out / "model.xml"
    if precision == "int8":
        return Made(skipped="OpenVINO int8 is static (NNCF): ask for int8-static")
    try:
        if precision in ("fp32", "fp16"):
            quantize.openvino_ir(src, xml, fp16=precision == "fp16")
        else:
            quantize.openvino_int8(src, xml, ctx.calibration, ctx.batched)
    except Exception as exc:  # OpenVINO's reader refuses operators it lacks (e.g. ONNX-ML tree ensembles)
        return Made(skipped=f"OpenVINO cannot take this model: {_telling_line(str(exc))}")
    files = [xml, xml.with_suffix(".bin")]
    if precision == "fp16":
        if not _openvino_has_fp16():
            return Made(files, note="fp16 weights; this CPU computes in f32 (no native fp16)")
        return Made(files, [OpenVinoParameters(inference_precision_hint="f16")])
    return Made(files, note=_calibration_note(ctx) if precision == "int8-static" else "")


def _torch_module(ctx: MakeContext, precision: str) -> object:
    import torch

    if not ctx.source.is_torch:
        raise Unsupported(f"a {ctx.source.kind} source has no torch module to trace")
    module = ctx.source.module
    if precision == "int8":
        module = torch.ao.quantization.quantize_dynamic(module, {torch.nn.Linear}, dtype=torch.qint8)
    return module


def _examples(ctx: MakeContext) -> tuple[object, ...]:
    import torch

    if ctx.source.examples is not None:  # the file's own request: a model that does not batch traces it
        return tuple(torch.from_numpy(np.ascontiguousarray(e)) for e in ctx.source.examples)
    out = []
    for t in ctx.source.inputs:
        shape = [2 if i == 0 and d < 0 else (1 if d < 0 else d) for i, d in enumerate(t.shape)]
        out.append(torch.zeros(shape, dtype=getattr(torch, str(t.dtype.numpy_dtype))))
    return tuple(out)


def _torchscript(ctx: MakeContext, precision: str, out: Path) -> Made:
    import torch

    if not ctx.source.is_torch and ctx.source.kind != "torchscript":
        raise Unsupported(f"a {ctx.source.kind} source has no torch module to trace")
    if precision not in ("fp32", "int8"):
        why = "CPU fp16 kernels are slow" if precision == "fp16" else "static int8 needs torch's FX flow"
        return Made(skipped=f"{precision} TorchScript is not offered ({why}); use onnx or openvino")
    dst = out / "model.pt"
    if ctx.source.kind == "torchscript" and precision == "fp32":
        shutil.copyfile(ctx.source.path, dst)
        return Made([dst])
    module = _torch_module(ctx, precision)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(module, _examples(ctx), check_trace=False)
    if precision == "int8" and "quantized" not in str(traced.inlined_graph):
        return Made(skipped="no nn.Linear layer to quantise dynamically")
    torch.jit.save(traced, str(dst))
    return Made([dst])


def _torch_export(ctx: MakeContext, precision: str, out: Path) -> Made:
    import torch

    if precision != "fp32":
        return Made(skipped=f"{precision} torch.export programs are not offered (use torchscript int8 or onnx)")
    if not ctx.source.is_torch:
        raise Unsupported(f"a {ctx.source.kind} source has no torch module to export")
    examples = _examples(ctx)
    program = torch.export.export(ctx.source.module, examples, dynamic_shapes=_dynamic_shapes(ctx))
    dst = out / "model.pt2"
    torch.export.save(program, str(dst))
    return Made([dst])


def _dynamic_shapes(ctx: MakeContext) -> tuple[dict[int, object], ...]:
    """torch.export's dims: one batch Dim on axis 0 of every input, or each input's own dynamic axes."""
    import torch

    if ctx.batched:
        batch = torch.export.Dim("batch", min=1)
        return tuple({0: batch} for _ in ctx.source.inputs)
    return tuple(
        {i: torch.export.Dim(f"{t.name}_{i}", min=1) for i, d in enumerate(t.shape) if d < 0} for t in ctx.source.inputs
    )


def _tensorrt(ctx: MakeContext, precision: str, out: Path) -> Made:
    from servelab.convert.tensorrt import build_engine, tensorrt_missing

    missing = tensorrt_missing()
    if missing:
        return Made(skipped=missing)
    if not ctx.batched:
        return Made(skipped="the TensorRT profiles here span a batch axis, and this model does not batch")
    dst = out / "model.plan"
    build_engine(_need_onnx(ctx), dst, ctx.source.inputs, precision, ctx.max_batch_size, ctx.calibration)
    return Made([dst])


_MAKERS: dict[str, Callable[[MakeContext, str, Path], Made]] = {
    "onnx": _onnx, "openvino": _openvino, "torchscript": _torchscript, "torch_export": _torch_export,
    "tensorrt": _tensorrt,
}  # fmt: skip


def make_artefact(ctx: MakeContext, target: str, precision: str, out: Path) -> Made:
    """Make ``target`` at ``precision`` under ``out``; Unsupported becomes a skip with its reason."""
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _MAKERS[target](ctx, precision, out)
    except Unsupported as exc:
        return Made(skipped=exc.message)
