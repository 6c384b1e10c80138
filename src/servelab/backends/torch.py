"""PyTorch backend: a TorchScript ``model.pt`` or a ``torch.export`` program ``model.pt2``, on CPU.

Inputs go to ``forward`` positionally in config order; Triton's ``INPUT__0`` naming is also read:
when every input name ends in ``__N``, N is its position (outputs likewise with ``OUTPUT__N``).
Arrays cross to torch without copies (``torch.from_numpy``; BF16 as an int16 view).

Threads: torch's intra-op parallelism is OpenMP, whose thread count is a setting of each calling
thread, so the backend applies it in the thread that runs the model, on its first call there. The
default is ONE thread per instance: OpenMP workers spin-wait between ops and, beside the server's own
event loop and I/O threads, stall small ops badly (measured: a 32-row MLP call went from 20 us
in-process to 315 us inside the server with the default 2 threads, back to 28 us with 1). Large models
set ``intra_op_thread_count`` (and add instances rather than threads where they can).
"""

from __future__ import annotations

import re
import threading
import warnings
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from servelab.backends._specs import TensorSpec, complete_config, config_dtype, model_file
from servelab.backends.base import Backend, BackendContext, Inputs, Outputs
from servelab.backends.parameters import TorchParameters
from servelab.errors import InternalError, InvalidArgument, Unsupported
from servelab.protocol import model_config_pb2 as mc
from servelab.types import DataType

__all__ = ["TorchBackend"]

_SUFFIX = re.compile(r"__(\d+)$")
_BF16 = DataType.BF16.numpy_dtype
_TORCH_TYPES: dict[torch.dtype, DataType] = {
    torch.bool: DataType.BOOL,
    torch.uint8: DataType.UINT8,
    torch.uint16: DataType.UINT16,
    torch.uint32: DataType.UINT32,
    torch.uint64: DataType.UINT64,
    torch.int8: DataType.INT8,
    torch.int16: DataType.INT16,
    torch.int32: DataType.INT32,
    torch.int64: DataType.INT64,
    torch.float16: DataType.FP16,
    torch.float32: DataType.FP32,
    torch.float64: DataType.FP64,
    torch.bfloat16: DataType.BF16,
}
_FILES = {"pytorch_libtorch": ("model.pt",), "torch_export": ("model.pt2",)}


def _ordered(names: list[str]) -> list[str]:
    """Config order, or the ``__N`` positions when every name carries one."""
    positions = [_SUFFIX.search(n) for n in names]
    if names and all(positions):
        return [
            n for _, n in sorted((int(m.group(1)), n) for m, n in zip(positions, names, strict=True) if m)
        ]
    return names


def _dtype(dtype: torch.dtype, what: str) -> DataType:
    if dtype not in _TORCH_TYPES:
        raise Unsupported(f"{what} has torch dtype {dtype}, which has no Open Inference Protocol datatype")
    return _TORCH_TYPES[dtype]


def to_torch(arr: np.ndarray) -> torch.Tensor:
    """A tensor sharing ``arr``'s memory (bfloat16 through an int16 view)."""
    if arr.dtype == _BF16:
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """An array sharing ``tensor``'s memory (bfloat16 through an int16 view)."""
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(_BF16)
    return tensor.numpy()


def _jit_load(path: Path) -> Any:
    """torch.jit.load without its deprecation warning: Triton's libtorch format is what we serve."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.load(str(path), map_location="cpu")


def _file_candidates(config: mc.ModelConfig) -> tuple[str, ...]:
    return _FILES.get(config.platform, ("model.pt", "model.pt2"))


def _program_specs(path: Path) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """Inputs (named after forward's arguments) and outputs (OUTPUT__N) of a saved torch.export program."""
    program = torch.export.load(str(path))
    signature = program.graph_signature
    nodes = {n.name: n for n in program.graph.nodes}

    def spec(name: str, node_name: str) -> TensorSpec:
        val = nodes[node_name].meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise Unsupported(f"torch.export program {path}: '{node_name}' is not a tensor")
        shape = tuple(d if isinstance(d, int) else -1 for d in val.shape)
        return TensorSpec(name, _dtype(val.dtype, f"tensor '{node_name}'"), shape)

    inputs = [spec(n, n) for n in signature.user_inputs]
    outputs = [spec(f"OUTPUT__{i}", n) for i, n in enumerate(signature.user_outputs) if n is not None]
    return inputs, outputs


def _match_positions(
    config: mc.ModelConfig, specs: list[TensorSpec], field: Any, kind: str
) -> list[TensorSpec]:
    """Rename the model's specs to the config's names, matched by position (torch has no tensor names)."""
    given = _ordered([t.name for t in field])
    if not given:
        return specs
    if len(given) != len(specs):
        raise InvalidArgument(f"config has {len(given)} {kind}s {given} but the model has {len(specs)}")
    return [TensorSpec(name, s.dtype, s.shape) for name, s in zip(given, specs, strict=True)]


class TorchBackend(Backend):
    """Runs TorchScript or torch.export programs with PyTorch on CPU."""

    kind: ClassVar[str] = "pytorch"
    platforms: ClassVar[tuple[str, ...]] = ("pytorch_libtorch", "torch_export")
    default_filename: ClassVar[str] = "model.pt"
    never_blocks = True  # the runtime computes; nothing in a call waits on I/O or a lock

    def __init__(self, ctx: BackendContext) -> None:
        super().__init__(ctx)
        self.module: Any = None
        self._inputs: list[str] = []
        self._outputs: list[str] = []

    @classmethod
    def autocomplete(cls, config: mc.ModelConfig, version_dir: Path) -> None:
        path = model_file(config, version_dir, *_file_candidates(config))
        if path.suffix == ".pt2":
            inputs, outputs = _program_specs(path)
            inputs = _match_positions(config, inputs, config.input, "input")
            outputs = _match_positions(config, outputs, config.output, "output")
            complete_config(config, inputs, outputs)
        elif not config.input:
            module = _jit_load(path)
            raise InvalidArgument(_inputs_needed_message(module, path))
        elif not config.output:
            _probe_outputs(config, _jit_load(path))

    def load(self) -> None:
        path = model_file(self.config, self.ctx.version_dir, *_file_candidates(self.config))
        for tensor in (*self.config.input, *self.config.output):
            if tensor.data_type == mc.TYPE_STRING:
                raise Unsupported(
                    f"the pytorch backend cannot take BYTES tensors ('{tensor.name}'); use python"
                )
        self._threads = TorchParameters.read(self.config).intra_op_thread_count or 1
        try:
            if path.suffix == ".pt2":
                self.module = torch.export.load(str(path)).module()
            else:
                self.module = _jit_load(path).eval()
        except Exception as exc:
            raise InvalidArgument(f"cannot load {path} with torch: {exc}") from exc
        self._inputs = _ordered([t.name for t in self.config.input])
        self._outputs = _ordered([t.name for t in self.config.output])

    def infer(self, inputs: Inputs) -> Outputs:
        if self._threads and getattr(_THREAD, "torch_threads", 0) != self._threads:
            # OpenMP's thread count is per calling thread: apply it in the thread that runs the model
            torch.set_num_threads(self._threads)
            _THREAD.torch_threads = self._threads
        tensors = [to_torch(inputs[name]) for name in self._inputs]
        with torch.inference_mode():
            result = self.module(*tensors)
        if isinstance(result, torch.Tensor):
            result = (result,)
        elif isinstance(result, dict):
            result = tuple(result.values())
        if len(result) < len(self._outputs):
            raise InternalError(
                f"model '{self.ctx.model_name}' returned {len(result)} outputs, config lists {self._outputs}"
            )
        return {name: to_numpy(t) for name, t in zip(self._outputs, result, strict=False)}

    def unload(self) -> None:
        self.module = None


_THREAD = threading.local()
# Wire buffers arrive as read-only numpy views; torch only reads inputs, so its warning is noise.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)


def _inputs_needed_message(module: Any, path: Path) -> str:
    try:
        args = [a.name for a in module.forward.schema.arguments[1:]]
    except (AttributeError, RuntimeError):
        args = []
    example = ", ".join(
        f'{{ name: "INPUT__{i}", data_type: TYPE_FP32, dims: [16] }}' for i in range(max(1, len(args)))
    )
    named = f" (forward takes {len(args)}: {', '.join(args)})" if args else ""
    return (
        f"TorchScript model {path} does not record its input types and shapes: add one input per forward "
        f"argument{named} to config.pbtxt, in order, with your data types and dims (without the batch "
        f"dimension when max_batch_size > 0), e.g.\ninput [ {example} ]"
    )


def _probe_inputs(config: mc.ModelConfig, size: int) -> list[torch.Tensor]:
    tensors = []
    for tensor in (config.input[i] for i in _positions(config)):
        shape = [size if d < 0 else d for d in tensor.dims]
        if config.max_batch_size > 0:
            shape.insert(0, size)
        dtype = config_dtype(tensor.data_type)
        tensors.append(to_torch(np.zeros(shape, dtype=dtype.numpy_dtype)))
    return tensors


def _positions(config: mc.ModelConfig) -> list[int]:
    names = [t.name for t in config.input]
    return [names.index(n) for n in _ordered(names)]


def _probe_outputs(config: mc.ModelConfig, module: Any) -> None:
    """Run forward twice on zeros (dynamic dims as 1, then 2): dims that change are dynamic."""
    for tensor in config.input:
        if tensor.data_type == mc.TYPE_INVALID or (not tensor.dims and config.max_batch_size == 0):
            raise InvalidArgument(
                f"input '{tensor.name}' needs data_type and dims in config.pbtxt to probe the model"
            )
    results = []
    for size in (1, 2):
        with torch.inference_mode():
            try:
                out = module(*_probe_inputs(config, size))
            except Exception as exc:
                raise InvalidArgument(
                    f"probe forward on zeros failed ({exc}); state the outputs in config.pbtxt"
                ) from exc
        results.append((out,) if isinstance(out, torch.Tensor) else tuple(out))
    skip = 1 if config.max_batch_size > 0 else 0
    for i, (a, b) in enumerate(zip(*results, strict=True)):
        dims = [x if x == y else -1 for x, y in zip(a.shape[skip:], b.shape[skip:], strict=True)]
        dtype = _dtype(a.dtype, f"output {i}")
        config.output.add(name=f"OUTPUT__{i}", data_type=int(mc.DataType.Value(dtype.triton_name)), dims=dims)
