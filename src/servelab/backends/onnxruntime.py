"""ONNX Runtime backend: one InferenceSession per instance, CPU by default, CUDA/TensorRT on request.

Parameters (config.pbtxt ``parameters``, read by :class:`~servelab.backends.parameters.OnnxRuntimeParameters`):
``intra_op_thread_count`` (default: the instance's threads), ``inter_op_thread_count``,
``graph_optimization_level`` (disable|basic|extended|all), ``allow_spinning`` (0/1),
``execution_providers`` (comma list, e.g. "CUDAExecutionProvider"; when given it decides alone).
Triton's ``optimization`` block is honoured as Triton's onnxruntime backend honours it
(:mod:`servelab.backends._ort_optimization`): ``graph.level`` and the CPU / GPU execution accelerators.

Data types: every OIP datatype. ORT's Python binding cannot take or return numpy bfloat16 arrays,
so BF16 inputs are fed as OrtValues and BF16 outputs read through ``run_with_ort_values``; string
tensors are decoded/encoded as UTF-8 (ORT would turn ``bytes`` into their ``str()`` repr), which is
per-element Python work. A model with string inputs *and* BF16 outputs is refused at load. Models with
neither take the fast path: ``session.run(None, feed)`` zipped into a dict.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import onnx
import onnxruntime as ort

from servelab.backends._ort_optimization import Provider, cpu_accelerators, gpu_accelerators, graph_level
from servelab.backends._specs import TensorSpec, complete_config, model_file
from servelab.backends.base import Backend, BackendContext, Inputs, Outputs
from servelab.backends.parameters import OnnxRuntimeParameters
from servelab.errors import InvalidArgument, Unsupported
from servelab.protocol import model_config_pb2 as mc
from servelab.types import DataType

__all__ = ["OnnxRuntimeBackend", "onnx_specs"]

_ONNX_TYPES: dict[int, DataType] = {
    onnx.TensorProto.BOOL: DataType.BOOL,
    onnx.TensorProto.UINT8: DataType.UINT8,
    onnx.TensorProto.UINT16: DataType.UINT16,
    onnx.TensorProto.UINT32: DataType.UINT32,
    onnx.TensorProto.UINT64: DataType.UINT64,
    onnx.TensorProto.INT8: DataType.INT8,
    onnx.TensorProto.INT16: DataType.INT16,
    onnx.TensorProto.INT32: DataType.INT32,
    onnx.TensorProto.INT64: DataType.INT64,
    onnx.TensorProto.FLOAT16: DataType.FP16,
    onnx.TensorProto.FLOAT: DataType.FP32,
    onnx.TensorProto.DOUBLE: DataType.FP64,
    onnx.TensorProto.BFLOAT16: DataType.BF16,
    onnx.TensorProto.STRING: DataType.BYTES,
}
_OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
_BF16 = DataType.BF16.numpy_dtype


def _value_spec(value: onnx.ValueInfoProto) -> TensorSpec:
    ttype = value.type.tensor_type
    if not value.type.HasField("tensor_type") or ttype.elem_type not in _ONNX_TYPES:
        raise Unsupported(f"ONNX tensor '{value.name}' has a type servelab cannot serve: {value.type}")
    shape = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in ttype.shape.dim)
    return TensorSpec(value.name, _ONNX_TYPES[ttype.elem_type], shape)


def onnx_specs(path: Path) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """Inputs and outputs of an ONNX file (initializers excluded), without loading external weights."""
    model = onnx.load(str(path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    inputs = [_value_spec(v) for v in model.graph.input if v.name not in initializers]
    return inputs, [_value_spec(v) for v in model.graph.output]


def _to_str(arr: np.ndarray, name: str = "") -> np.ndarray:
    """ONNX string tensors hold text: BYTES elements must be UTF-8."""
    try:
        flat = [b.decode() if isinstance(b, bytes) else str(b) for b in arr.reshape(-1)]
    except UnicodeDecodeError as exc:
        raise InvalidArgument(
            f"input '{name}': ONNX string tensors need UTF-8 text; an element is not valid UTF-8 ({exc.reason})"
        ) from None
    return np.array(flat, dtype=object).reshape(arr.shape)


def _to_bytes(arr: np.ndarray) -> np.ndarray:
    flat = [s.encode() if isinstance(s, str) else bytes(s) for s in arr.reshape(-1)]
    return np.array(flat, dtype=object).reshape(arr.shape)


def _bf16_from_ortvalue(value: Any) -> np.ndarray:
    shape = tuple(value.shape())
    raw = (ctypes.c_char * value.tensor_size_in_bytes()).from_address(value.data_ptr())
    return np.frombuffer(raw, dtype=np.uint16).copy().view(_BF16).reshape(shape)


class OnnxRuntimeBackend(Backend):
    """Runs an ONNX model with onnxruntime."""

    kind: ClassVar[str] = "onnxruntime"
    platforms: ClassVar[tuple[str, ...]] = ("onnxruntime_onnx",)
    default_filename: ClassVar[str] = "model.onnx"
    never_blocks = True  # the runtime computes; nothing in a call waits on I/O or a lock

    def __init__(self, ctx: BackendContext) -> None:
        super().__init__(ctx)
        self.session: ort.InferenceSession | None = None
        self._run: Any = None
        self._output_names: tuple[str, ...] = ()
        self._slow = False
        self._string_inputs: tuple[str, ...] = ()
        self._bf16_inputs: tuple[str, ...] = ()
        self._bf16_outputs = False
        self.params = OnnxRuntimeParameters()

    @classmethod
    def autocomplete(cls, config: mc.ModelConfig, version_dir: Path) -> None:
        inputs, outputs = onnx_specs(model_file(config, version_dir, cls.default_filename))
        complete_config(config, inputs, outputs)

    def load(self) -> None:
        path = model_file(self.config, self.ctx.version_dir, self.default_filename)
        self.params = OnnxRuntimeParameters.read(self.config)
        self.session = ort.InferenceSession(str(path), self._session_options(), providers=self._providers())
        self._run = self.session.run
        self._output_names = tuple(o.name for o in self.session.get_outputs())
        inputs = self.session.get_inputs()
        self._string_inputs = tuple(i.name for i in inputs if i.type == "tensor(string)")
        self._bf16_inputs = tuple(i.name for i in inputs if i.type == "tensor(bfloat16)")
        self._bf16_outputs = any(o.type == "tensor(bfloat16)" for o in self.session.get_outputs())
        if self._bf16_outputs and self._string_inputs:
            raise Unsupported(
                f"model '{self.ctx.model_name}' has string inputs and bfloat16 outputs, a combination "
                "onnxruntime's Python API cannot run; cast the outputs to float32 in the model"
            )
        kinds = {o.type for o in self.session.get_outputs()} | {i.type for i in inputs}
        self._slow = bool(kinds & {"tensor(string)", "tensor(bfloat16)"})

    def infer(self, inputs: Inputs) -> Outputs:
        if self._slow:
            return self._infer_converting(inputs)
        return dict(zip(self._output_names, self._run(None, inputs), strict=True))

    def unload(self) -> None:
        self.session = None
        self._run = None

    def _infer_converting(self, inputs: Inputs) -> Outputs:
        """The path for string and bfloat16 tensors, which the plain numpy feed cannot carry."""
        feed: dict[str, Any] = {}
        for name, arr in inputs.items():
            if name in self._string_inputs:
                feed[name] = _to_str(arr, name)
            elif name in self._bf16_inputs:
                raw = np.ascontiguousarray(arr).view(np.uint16)
                feed[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, onnx.TensorProto.BFLOAT16)
            elif self._bf16_outputs:
                feed[name] = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(arr))
            else:
                feed[name] = arr
        assert self.session is not None
        if not self._bf16_outputs:
            arrays = self.session.run(None, feed)
            return {
                name: _to_bytes(arr) if arr.dtype == object else arr
                for name, arr in zip(self._output_names, arrays, strict=True)
            }
        values = self.session.run_with_ort_values(list(self._output_names), feed)
        outputs: Outputs = {}
        for name, value in zip(self._output_names, values, strict=True):
            kind = value.data_type()
            if kind == "tensor(bfloat16)":
                outputs[name] = _bf16_from_ortvalue(value)
            elif kind == "tensor(string)":
                outputs[name] = _to_bytes(value.numpy())
            else:
                outputs[name] = value.numpy()
        return outputs

    def _session_options(self) -> ort.SessionOptions:
        params = self.params
        opts = ort.SessionOptions()
        # runtime errors reach the client as the request's error; ORT need not print them to stderr too
        opts.log_severity_level = params.log_severity_level
        intra = params.intra_op_thread_count
        opts.intra_op_num_threads = self.ctx.threads if intra is None else intra
        inter = params.inter_op_thread_count
        if inter is not None:
            opts.inter_op_num_threads = inter
            opts.execution_mode = (
                ort.ExecutionMode.ORT_PARALLEL if inter > 1 else ort.ExecutionMode.ORT_SEQUENTIAL
            )
        opts.graph_optimization_level = _OPT_LEVELS[graph_level(self.config, params.graph_optimization_level)]
        if params.allow_spinning is not None:
            spin = "1" if params.allow_spinning else "0"
            opts.add_session_config_entry("session.intra_op.allow_spinning", spin)
            opts.add_session_config_entry("session.inter_op.allow_spinning", spin)
        return opts

    def _providers(self) -> list[Provider]:
        available = ort.get_available_providers()
        names: list[Provider] = list(self.params.execution_providers)
        if names:
            missing = [p for p in names if p not in available]
            if missing:
                raise Unsupported(
                    f"execution providers {missing} are not available here; available: {available}"
                )
            return [*names, "CPUExecutionProvider"] if "CPUExecutionProvider" not in names else names
        wants_gpu = any(g.kind == mc.ModelInstanceGroup.KIND_GPU for g in self.config.instance_group)
        gpu = gpu_accelerators(self.config, available) if wants_gpu else []
        return [*gpu, *cpu_accelerators(self.config, available), "CPUExecutionProvider"]
