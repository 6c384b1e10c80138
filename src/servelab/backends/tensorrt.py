"""TensorRT backend: a serialized engine ``model.plan`` on one NVIDIA GPU (TensorRT Python API v10).

Needs ``tensorrt`` and a CUDA build of torch (device buffers and the stream are torch's); both are
imported in :meth:`TensorRTBackend.load`, so this module imports anywhere. Each call sets the input
shapes, binds device buffers by tensor name and runs ``execute_async_v3`` on the instance's stream;
calls are serialised by a lock because one execution context is not reentrant.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from servelab.backends._specs import TensorSpec, complete_config, model_file
from servelab.backends.base import Backend, BackendContext, Inputs, Outputs
from servelab.backends.parameters import TensorRTParameters
from servelab.errors import InvalidArgument, Unavailable, Unsupported
from servelab.protocol import model_config_pb2 as mc
from servelab.types import DataType

__all__ = ["TensorRTBackend"]

_INSTALL = "pip install 'servelab[tensorrt]'"
#: TensorRT DataType member name -> OIP datatype
_TRT_TYPES = {
    "BOOL": DataType.BOOL,
    "UINT8": DataType.UINT8,
    "INT8": DataType.INT8,
    "INT32": DataType.INT32,
    "INT64": DataType.INT64,
    "HALF": DataType.FP16,
    "FLOAT": DataType.FP32,
    "BF16": DataType.BF16,
}


def _import_tensorrt() -> Any:
    try:
        import tensorrt
    except ImportError as exc:
        raise Unsupported(
            f"the tensorrt backend needs TensorRT ({exc}); install it with: {_INSTALL}"
        ) from exc
    return tensorrt


def _import_cuda_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise Unsupported(
            f"the tensorrt backend needs torch with CUDA for device buffers; {_INSTALL}"
        ) from exc
    if not torch.cuda.is_available():
        raise Unavailable("the tensorrt backend needs an NVIDIA GPU, and torch sees none")
    return torch


def _engine(trt: Any, path: Path) -> Any:
    runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
    engine = runtime.deserialize_cuda_engine(path.read_bytes())
    if engine is None:
        raise InvalidArgument(
            f"TensorRT could not deserialize {path} (built for another TensorRT version or GPU?)"
        )
    return engine


def _io_specs(trt: Any, engine: Any) -> tuple[list[TensorSpec], list[TensorSpec]]:
    inputs: list[TensorSpec] = []
    outputs: list[TensorSpec] = []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        type_name = engine.get_tensor_dtype(name).name
        if type_name not in _TRT_TYPES:
            raise Unsupported(f"TensorRT tensor '{name}' has type {type_name}, not servable")
        spec = TensorSpec(name, _TRT_TYPES[type_name], tuple(int(d) for d in engine.get_tensor_shape(name)))
        (inputs if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else outputs).append(spec)
    return inputs, outputs


class TensorRTBackend(Backend):
    """Runs a TensorRT engine with device buffers from torch."""

    kind: ClassVar[str] = "tensorrt"
    platforms: ClassVar[tuple[str, ...]] = ("tensorrt_plan",)
    default_filename: ClassVar[str] = "model.plan"
    never_blocks = True  # the runtime computes; nothing in a call waits on I/O or a lock

    def __init__(self, ctx: BackendContext) -> None:
        super().__init__(ctx)
        self._torch: Any = None
        self._engine: Any = None
        self._context: Any = None
        self._stream: Any = None
        self._outputs: list[TensorSpec] = []
        self._lock = threading.Lock()

    @classmethod
    def autocomplete(cls, config: mc.ModelConfig, version_dir: Path) -> None:
        trt = _import_tensorrt()
        engine = _engine(trt, model_file(config, version_dir, cls.default_filename))
        complete_config(config, *_io_specs(trt, engine))

    def load(self) -> None:
        TensorRTParameters.read(self.config)  # the engine holds its settings; no key is read here
        trt = _import_tensorrt()
        self._torch = _import_cuda_torch()
        self._engine = _engine(trt, model_file(self.config, self.ctx.version_dir, self.default_filename))
        self._context = self._engine.create_execution_context()
        self._stream = self._torch.cuda.Stream()
        _, self._outputs = _io_specs(trt, self._engine)

    def infer(self, inputs: Inputs) -> Outputs:
        torch = self._torch
        with self._lock, torch.cuda.stream(self._stream):
            keep = []
            for name, arr in inputs.items():
                device = _to_torch(torch, arr).to("cuda", non_blocking=True)
                keep.append(device)
                self._context.set_input_shape(name, tuple(arr.shape))
                self._context.set_tensor_address(name, device.data_ptr())
            results = {}
            for spec in self._outputs:
                shape = tuple(self._context.get_tensor_shape(spec.name))
                out = torch.empty(shape, dtype=_torch_dtype(torch, spec.dtype), device="cuda")
                self._context.set_tensor_address(spec.name, out.data_ptr())
                results[spec.name] = out
            if not self._context.execute_async_v3(self._stream.cuda_stream):
                raise Unavailable(f"TensorRT execution failed for model '{self.ctx.model_name}'")
            host_out = {name: t.cpu() for name, t in results.items()}
            self._stream.synchronize()
        return {name: _to_numpy(torch, t) for name, t in host_out.items()}

    def unload(self) -> None:
        self._context = None
        self._engine = None
        self._stream = None


def _torch_dtype(torch: Any, dtype: DataType) -> Any:
    return {
        DataType.BOOL: torch.bool,
        DataType.UINT8: torch.uint8,
        DataType.INT8: torch.int8,
        DataType.INT32: torch.int32,
        DataType.INT64: torch.int64,
        DataType.FP16: torch.float16,
        DataType.FP32: torch.float32,
        DataType.BF16: torch.bfloat16,
    }[dtype]


def _to_torch(torch: Any, arr: np.ndarray) -> Any:
    arr = np.ascontiguousarray(arr)
    if arr.dtype == DataType.BF16.numpy_dtype:
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)


def _to_numpy(torch: Any, tensor: Any) -> np.ndarray:
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(DataType.BF16.numpy_dtype)
    return tensor.numpy()
