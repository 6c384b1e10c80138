"""Export a PyTorch module to the files servelab's backends load.

Each function writes one artefact and returns its path. With ``dynamic_batch`` the first dimension
of every input and output is left dynamic, so auto-complete sees a batching model.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import torch

__all__ = ["export_onnx", "export_openvino", "export_torch_program", "export_torchscript"]


def _as_tuple(example_inputs: torch.Tensor | Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    inputs = tuple(example_inputs)
    if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise ValueError("example_inputs must be a tensor or a non-empty sequence of tensors")
    return inputs


def _prepare(path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


def export_onnx(
    module: torch.nn.Module,
    example_inputs: torch.Tensor | Sequence[torch.Tensor],
    path: str | Path,
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic_batch: bool = True,
    opset: int = 17,
) -> Path:
    """Export ``module`` to one self-contained ONNX file (TorchScript-based exporter: fast, no side files)."""
    inputs = _as_tuple(example_inputs)
    if len(input_names) != len(inputs):
        raise ValueError(f"got {len(input_names)} input_names for {len(inputs)} example inputs")
    out = _prepare(path)
    axes = {name: {0: "batch"} for name in [*input_names, *output_names]} if dynamic_batch else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            module.eval(),
            inputs,
            str(out),
            input_names=list(input_names),
            output_names=list(output_names),
            dynamic_axes=axes,
            opset_version=opset,
            dynamo=False,
        )
    return out


def export_torchscript(
    module: torch.nn.Module, example_inputs: torch.Tensor | Sequence[torch.Tensor], path: str | Path
) -> Path:
    """Trace ``module`` with torch.jit.trace and save it (``model.pt``)."""
    out = _prepare(path)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript is Triton's libtorch format
        traced = torch.jit.trace(module.eval(), _as_tuple(example_inputs))
        torch.jit.save(traced, str(out))
    return out


def export_torch_program(
    module: torch.nn.Module,
    example_inputs: torch.Tensor | Sequence[torch.Tensor],
    path: str | Path,
    dynamic_batch: bool = True,
) -> Path:
    """Export with torch.export and save the program (``model.pt2``).

    torch.export specialises a dimension of size 1, so with ``dynamic_batch`` an example batch of 1
    is repeated to 2 before tracing; the saved program accepts any batch size >= 1.
    """
    inputs = _as_tuple(example_inputs)
    shapes: tuple[dict[int, torch.export.Dim], ...] | None = None
    if dynamic_batch:
        if any(t.dim() == 0 for t in inputs):
            raise ValueError("dynamic_batch needs every example input to have a batch dimension")
        inputs = tuple(torch.cat([t, t]) if t.shape[0] == 1 else t for t in inputs)
        batch = torch.export.Dim("batch", min=1)
        shapes = tuple({0: batch} for _ in inputs)
    program = torch.export.export(module.eval(), inputs, dynamic_shapes=shapes)
    out = _prepare(path)
    torch.export.save(program, str(out))
    return out


def export_openvino(onnx_path: str | Path, xml_path: str | Path) -> Path:
    """Convert an ONNX file to OpenVINO IR (``model.xml`` + ``model.bin``), keeping fp32 weights."""
    import openvino as ov

    from servelab.backends.openvino_convert import convert_onnx

    out = _prepare(xml_path)
    ov.save_model(convert_onnx(onnx_path), str(out), compress_to_fp16=False)
    return out
