"""Torch sources of ``servelab convert``: TorchScript files, ``torch.export`` programs, Python module factories.

Each is loaded into a :class:`~servelab.convert.source_types.Source` whose reference runs the module eagerly
(torch imported only here, when such a source is loaded). A Python file may say that its model does not
batch (``max_batch_size = 0``, ``dynamic_axes``) and give its own example request.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servelab.convert.source_types import Source, SourceKind, Task, TensorInfo
from servelab.errors import InvalidArgument
from servelab.types import DataType

__all__ = ["load_program", "load_python", "load_torchscript"]


def _torch_run(module: Any, inputs: list[TensorInfo]) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    import torch

    def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        tensors = [torch.from_numpy(np.ascontiguousarray(feed[t.name])) for t in inputs]
        with torch.inference_mode():
            out = module(*tensors)
        if isinstance(out, torch.Tensor):
            out = (out,)
        elif isinstance(out, dict):
            out = tuple(out.values())
        return [o.detach().cpu().numpy() for o in out]

    return run


def _probe_outputs(
    run: Callable[[dict[str, np.ndarray]], list[np.ndarray]], inputs: list[TensorInfo], examples: list[np.ndarray] | None
) -> int:
    if examples is not None:
        feed = {t.name: e for t, e in zip(inputs, examples, strict=True)}
    else:
        feed = {t.name: _zeros(t, 2) for t in inputs}
    return len(run(feed))


def _zeros(info: TensorInfo, batch: int) -> np.ndarray:
    shape = [batch if i == 0 and d < 0 else (1 if d < 0 else d) for i, d in enumerate(info.shape)]
    return np.zeros(shape, dtype=info.dtype.numpy_dtype)


def _names(given: list[str] | None, count: int, prefix: str) -> list[str]:
    if given:
        if len(given) != count:
            raise InvalidArgument(f"got {len(given)} {prefix.lower()} names {given} for {count} tensors")
        return list(given)
    return [f"{prefix}__{i}" for i in range(count)]


def _torch_source(
    kind: SourceKind, path: Path, module: Any, inputs: list[TensorInfo], output_names: list[str] | None, task: Task,
    batching: _Batching | None = None,
) -> Source:  # fmt: skip
    run = _torch_run(module, inputs)
    b = batching or _Batching()
    outputs = _names(output_names, _probe_outputs(run, inputs, b.examples), "OUTPUT")
    return Source(kind, path, inputs, outputs, task, module=module, batches=b.batches, examples=b.examples,
                  dynamic_axes=b.dynamic_axes, _run=run)  # fmt: skip


@dataclass
class _Batching:
    """What a Python source file says about batching: whether it does, its example request, its dynamic axes."""

    batches: bool = True
    examples: list[np.ndarray] | None = None
    dynamic_axes: dict[str, dict[int, str]] | None = None


def _file_dynamic_axes(code: Any, path: Path) -> dict[str, dict[int, str]] | None:
    axes = getattr(code, "dynamic_axes", None)
    if axes is None:
        return None
    try:
        return {str(name): {int(a): str(n) for a, n in dims.items()} for name, dims in axes.items()}
    except (AttributeError, TypeError, ValueError):
        raise InvalidArgument(f"{path}: dynamic_axes must map tensor names to {{axis: name}}, e.g. {{'x': {{0: 'rows'}}}}") from None


def _unbatched_info(name: str, example: np.ndarray, dtype: DataType, axes: dict[int, str] | None) -> TensorInfo:
    """A tensor of a model that does not batch: the example's shape, -1 at its dynamic axes (default axis 0)."""
    dynamic = set(axes) if axes is not None else {0}
    return TensorInfo(name, dtype, tuple(-1 if i in dynamic else d for i, d in enumerate(example.shape)))


def _need_inputs(inputs: list[TensorInfo] | None, path: Path) -> list[TensorInfo]:
    if not inputs:
        raise InvalidArgument(
            f"{path}: a TorchScript file does not record its input shapes; give --input NAME:DTYPE:dims "
            "per forward argument (e.g. --input INPUT__0:FP32:16)"
        )
    return inputs


def load_torchscript(path: Path, inputs: list[TensorInfo] | None, outputs: list[str] | None, task: Task) -> Source:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.load(str(path), map_location="cpu").eval()
    return _torch_source("torchscript", path, module, _need_inputs(inputs, path), outputs, task)


def load_program(path: Path, inputs: list[TensorInfo] | None, outputs: list[str] | None, task: Task) -> Source:
    import torch

    program = torch.export.load(str(path))
    if not inputs:
        nodes = {n.name: n for n in program.graph.nodes}
        inputs = []
        for i, name in enumerate(program.graph_signature.user_inputs):
            val = nodes[name].meta.get("val")
            dtype = DataType.from_triton(f"TYPE_{_TORCH_DTYPES.get(str(val.dtype), 'FP32')}")
            shape = tuple(d if isinstance(d, int) else -1 for d in val.shape)
            inputs.append(TensorInfo(f"INPUT__{i}", dtype, shape))
    return _torch_source("torch_export", path, _ProgramModule.wrap(program.module()), inputs, outputs, task)


def _program_module_class() -> type:
    import torch

    class ProgramModule(torch.nn.Module):
        """A torch.export program's module behind a plain Module: exporters call ``train(False)``, which
        the program's GraphModule refuses, so it is held outside the submodule tree."""

        def __init__(self, graph_module: Any) -> None:
            super().__init__()
            for param in graph_module.parameters():  # traced as constants: no autograd state
                param.requires_grad_(False)
            object.__setattr__(self, "_program", graph_module)

        def forward(self, *args: Any) -> Any:
            return self.__dict__["_program"](*args)

    return ProgramModule


class _ProgramModule:
    @staticmethod
    def wrap(graph_module: Any) -> Any:
        return _program_module_class()(graph_module)


_TORCH_DTYPES = {
    "torch.float32": "FP32", "torch.float16": "FP16", "torch.float64": "FP64", "torch.int64": "INT64",
    "torch.int32": "INT32", "torch.int8": "INT8", "torch.uint8": "UINT8", "torch.bool": "BOOL",
}  # fmt: skip


def _import_file(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"servelab_convert_source_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise InvalidArgument(f"{path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_python(
    path: Path, factory: str, inputs: list[TensorInfo] | None, outputs: list[str] | None, task: Task
) -> Source:
    """``make_model()`` (or the named factory) returns the module; the file may also define
    ``example_inputs()`` (tensors), ``input_names``, ``output_names``, ``task``, and for a model that does
    not batch ``max_batch_size = 0`` and ``dynamic_axes`` (default: axis 0 of every tensor, each its own)."""
    import torch

    code = _import_file(path)
    make = getattr(code, factory, None)
    if not callable(make):
        raise InvalidArgument(f"{path} defines no callable {factory!r}; expected a function returning a torch module")
    module = make()
    if not isinstance(module, torch.nn.Module):
        raise InvalidArgument(f"{path}:{factory} returned {type(module).__name__}, expected a torch.nn.Module")
    module.eval()
    batching = _Batching(batches=int(getattr(code, "max_batch_size", 1)) > 0, dynamic_axes=_file_dynamic_axes(code, path))
    if hasattr(code, "example_inputs"):
        examples = code.example_inputs()
        examples = (examples,) if isinstance(examples, torch.Tensor) else tuple(examples)
        names = _names(getattr(code, "input_names", None), len(examples), "INPUT")
        dtypes = [DataType.from_triton(f"TYPE_{_TORCH_DTYPES[str(t.dtype)]}") for t in examples]
        if not batching.batches:
            batching.examples = [t.detach().cpu().numpy() for t in examples]
        if not inputs and batching.batches:
            inputs = [TensorInfo(n, d, (-1, *t.shape[1:])) for n, d, t in zip(names, dtypes, examples, strict=True)]
        elif not inputs:
            axes = batching.dynamic_axes
            inputs = [_unbatched_info(n, e, d, None if axes is None else axes.get(n, {}))
                      for n, d, e in zip(names, dtypes, batching.examples or [], strict=True)]  # fmt: skip
    outputs = outputs or getattr(code, "output_names", None)
    task = getattr(code, "task", task) if task == "other" else task
    return _torch_source("python", path, module, _need_inputs(inputs, path), outputs, task, batching)
