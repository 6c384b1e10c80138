"""OpenVINO backend: an IR ``model.xml`` (or ``model.onnx`` with ``backend: "openvino"``) on the CPU plugin.

Parameters (read by :class:`~servelab.backends.parameters.OpenVinoParameters`): ``PERFORMANCE_HINT`` (LATENCY|THROUGHPUT, default LATENCY), ``NUM_STREAMS``,
``INFERENCE_NUM_THREADS`` (default: the instance's threads), ``INFERENCE_PRECISION_HINT`` (default
f32, so results match fp32 references; bf16/f16 trade accuracy for speed), and Triton's openvino-backend
key ``HINT_BF16`` (YES = bf16); its ``SKIP_OV_DYNAMIC_BATCHSIZE``, ``ENABLE_BATCH_PADDING``,
``RESHAPE_IO_LAYERS``, ``CPU_EXTENSION_PATH`` and ``COMPILATION_NUM_THREADS`` fail the load, saying so
(Triton's openvino backend reads no ``optimization`` field). When the config batches,
the model's first dimension is made dynamic. Each calling thread gets its own InferRequest, so
``infer`` is thread-safe. BF16 tensors cross as uint16 bits; BYTES tensors are not supported.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import openvino as ov

from servelab.backends._specs import TensorSpec, complete_config, model_file
from servelab.backends.base import Backend, BackendContext, Inputs, Outputs
from servelab.backends.parameters import OpenVinoParameters
from servelab.errors import InvalidArgument, Unsupported
from servelab.protocol import model_config_pb2 as mc
from servelab.types import DataType

__all__ = ["OpenVinoBackend", "openvino_specs"]

_FILES = ("model.xml", "model.onnx")
_OV_TYPES: dict[str, DataType] = {
    "boolean": DataType.BOOL,
    "u8": DataType.UINT8,
    "u16": DataType.UINT16,
    "u32": DataType.UINT32,
    "u64": DataType.UINT64,
    "i8": DataType.INT8,
    "i16": DataType.INT16,
    "i32": DataType.INT32,
    "i64": DataType.INT64,
    "f16": DataType.FP16,
    "f32": DataType.FP32,
    "f64": DataType.FP64,
    "bf16": DataType.BF16,
    "string": DataType.BYTES,
}
_BF16 = DataType.BF16.numpy_dtype


def _port_spec(port: Any) -> TensorSpec:
    type_name = port.get_element_type().get_type_name()
    if type_name not in _OV_TYPES:
        raise Unsupported(
            f"OpenVINO tensor '{port.get_any_name()}' has element type {type_name}, not servable"
        )
    shape = tuple(-1 if d.is_dynamic else d.get_length() for d in port.get_partial_shape())
    return TensorSpec(port.get_any_name(), _OV_TYPES[type_name], shape)


def openvino_specs(model: Any) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """Inputs and outputs of an ``ov.Model``."""
    return [_port_spec(p) for p in model.inputs], [_port_spec(p) for p in model.outputs]


def _config_name(port: Any, configured: list[str]) -> str:
    names = port.get_names()
    return next((n for n in configured if n in names), port.get_any_name())


class OpenVinoBackend(Backend):
    """Runs an OpenVINO IR or ONNX model on OpenVINO's CPU plugin."""

    kind: ClassVar[str] = "openvino"
    platforms: ClassVar[tuple[str, ...]] = ("openvino",)
    default_filename: ClassVar[str] = "model.xml"
    never_blocks = True  # the runtime computes; nothing in a call waits on I/O or a lock

    def __init__(self, ctx: BackendContext) -> None:
        super().__init__(ctx)
        self.compiled: Any = None
        self._local = threading.local()
        self._out_names: tuple[str, ...] = ()
        self._bf16_in: frozenset[str] = frozenset()
        self._bf16_out: tuple[bool, ...] = ()
        self._convert = False

    @classmethod
    def autocomplete(cls, config: mc.ModelConfig, version_dir: Path) -> None:
        model = ov.Core().read_model(str(model_file(config, version_dir, *_FILES)))
        inputs, outputs = openvino_specs(model)
        if config.max_batch_size > 0:  # load() makes a fixed first dimension dynamic
            inputs, outputs = (
                [TensorSpec(s.name, s.dtype, (-1, *s.shape[1:])) if s.shape else s for s in specs]
                for specs in (inputs, outputs)
            )
        complete_config(config, inputs, outputs)

    def load(self) -> None:
        path = model_file(self.config, self.ctx.version_dir, *_FILES)
        core = ov.Core()
        try:
            model = core.read_model(str(path))
        except Exception as exc:
            raise InvalidArgument(f"OpenVINO cannot read {path}: {exc}") from exc
        inputs, outputs = openvino_specs(model)
        if any(s.dtype is DataType.BYTES for s in inputs + outputs):
            raise Unsupported(
                f"the openvino backend cannot serve BYTES tensors (model '{self.ctx.model_name}')"
            )
        if self.config.max_batch_size > 0:
            self._make_batch_dynamic(model)
        self.compiled = core.compile_model(model, "CPU", self._properties())
        configured = [t.name for t in self.config.output]
        self._out_names = tuple(_config_name(p, configured) for p in model.outputs)
        self._bf16_out = tuple(s.dtype is DataType.BF16 for s in outputs)
        configured_in = [t.name for t in self.config.input]
        self._bf16_in = frozenset(
            _config_name(p, configured_in)
            for p, s in zip(model.inputs, inputs, strict=True)
            if s.dtype is DataType.BF16
        )
        self._convert = bool(self._bf16_in) or any(self._bf16_out)

    def infer(self, inputs: Inputs) -> Outputs:
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self.compiled.create_infer_request()
        if self._convert:
            return self._infer_bf16(request, inputs)
        return dict(zip(self._out_names, request.infer(inputs, share_inputs=True).to_tuple(), strict=True))

    def unload(self) -> None:
        self.compiled = None
        self._local = threading.local()

    def _infer_bf16(self, request: Any, inputs: Inputs) -> Outputs:
        feed: dict[str, Any] = {
            name: ov.Tensor(np.ascontiguousarray(a).view(np.uint16), a.shape, ov.Type.bf16)
            if name in self._bf16_in
            else a
            for name, a in inputs.items()
        }
        values = request.infer(feed).to_tuple()
        return {
            name: v.view(np.uint16).view(_BF16) if bf16 else v
            for name, v, bf16 in zip(self._out_names, values, self._bf16_out, strict=True)
        }

    def _make_batch_dynamic(self, model: Any) -> None:
        shapes = {}
        for port in model.inputs:
            shape = port.get_partial_shape()
            if shape.rank.is_static and len(shape) > 0 and shape[0].is_static:
                dims = [ov.Dimension(-1)] + [shape[i] for i in range(1, len(shape))]
                shapes[port.get_any_name()] = ov.PartialShape(dims)
        if shapes:
            try:
                model.reshape(shapes)
            except Exception as exc:
                raise InvalidArgument(
                    f"model '{self.ctx.model_name}' cannot take a dynamic batch dimension ({exc}); "
                    "set max_batch_size: 0"
                ) from exc

    def _properties(self) -> dict[str, Any]:
        params = OpenVinoParameters.read(self.config)
        threads = params.inference_num_threads
        props: dict[str, Any] = {
            "PERFORMANCE_HINT": params.performance_hint,
            "INFERENCE_PRECISION_HINT": params.precision,
            "INFERENCE_NUM_THREADS": self.ctx.threads if threads is None else threads,
        }
        if params.num_streams is not None:
            props["NUM_STREAMS"] = params.num_streams

        return props
