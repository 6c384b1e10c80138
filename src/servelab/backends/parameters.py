"""Typed ``parameters { key ... }`` of config.pbtxt: one pydantic model per backend and one for the scheduler.

Triton keeps every model parameter as a string in one map. Each model below names the keys one reader
understands, their types and defaults; :meth:`ModelParameters.read` parses a config's map (an error names
the key, what was expected and what came) and :meth:`ModelParameters.write` puts values back into a
config the same way, so ``servelab select`` writes what the backends read through the same code.

Keys a model does not know are left alone: one map carries the backend's and the scheduler's keys side
by side (and plug-in backends' own). The schema lives in the backends layer, below the repository and
the core, so that backends, schedulers, the repository and the advisor can all import it.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from servelab.errors import InvalidArgument, Unsupported
from servelab.protocol import model_config_pb2 as mc

__all__ = [
    "BACKEND_PARAMETERS",
    "ModelParameters",
    "OnnxRuntimeParameters",
    "OpenVinoParameters",
    "PythonParameters",
    "SchedulerParameters",
    "TensorFlowParameters",
    "TensorRTParameters",
    "TorchParameters",
    "TorchServeHandlerParameters",
    "parameters_for",
]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _raw_map(config: mc.ModelConfig) -> dict[str, str]:
    return {key: value.string_value for key, value in config.parameters.items()}


def _text(value: Any) -> str:
    """A field value as config.pbtxt's ``string_value`` holds it (booleans as 1/0, lists comma-joined)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _expected(error: Any) -> str:
    """What a failed field wanted, in words (pydantic's own message, shortened)."""
    msg = str(error.get("msg", "a valid value"))
    return msg.removeprefix("Value error, ").removeprefix("Input should be ")


class ModelParameters(BaseModel):
    """Base of every parameter schema: read from and write to a ModelConfig's ``parameters`` map."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    #: who reads these keys, for error messages ("onnxruntime backend", "scheduler")
    reader: ClassVar[str] = "model"
    #: fields written even at their default, where a reader of the file wants to see the value
    written_always: ClassVar[tuple[str, ...]] = ()
    #: the field that sets the runtime's threads per instance (what ``servelab select`` varies), if any
    threads_field: ClassVar[str | None] = None

    def with_threads(self, threads: int) -> Self:
        """A copy with the runtime's threads per instance set to ``threads`` (unchanged where none is read)."""
        if self.threads_field is None:
            return self
        return self.model_copy(update={self.threads_field: threads})

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The config keys this schema reads (aliases where a field has one)."""
        return tuple(f.alias or name for name, f in cls.model_fields.items())

    @classmethod
    def from_map(cls, values: dict[str, str]) -> Self:
        """Parse a ``key -> string_value`` map; InvalidArgument names the first bad key."""
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            key = str(first["loc"][0]) if first.get("loc") else "?"
            got = values.get(key)
            raise InvalidArgument(
                f"{cls.reader} parameter {key!r} must be {_expected(first)}, got {got!r}"
            ) from None

    @classmethod
    def read(cls, config: mc.ModelConfig) -> Self:
        """The typed parameters of ``config`` (defaults for keys it does not set)."""
        return cls.from_map(_raw_map(config))

    def to_map(self) -> dict[str, str]:
        """The keys this object sets (``None`` fields are left out), as config strings."""
        dumped = self.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)
        for name in self.written_always:
            value = getattr(self, name)
            if value is not None:
                dumped[type(self).model_fields[name].alias or name] = value
        return {key: _text(value) for key, value in dumped.items()}

    def write(self, config: mc.ModelConfig) -> None:
        """Set this object's keys in ``config.parameters`` (and drop this schema's keys it leaves unset)."""
        for key in self.keys():
            if key in config.parameters:
                del config.parameters[key]
        for key, value in self.to_map().items():
            config.parameters[key].string_value = value
        type(self).read(config)  # what was written reads back


def _lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _bool(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError("0 or 1 (or true/false)")
    return value


class OnnxRuntimeParameters(ModelParameters):
    """ONNX Runtime session options (backends/onnxruntime.py)."""

    reader: ClassVar[str] = "onnxruntime"
    threads_field: ClassVar[str | None] = "intra_op_thread_count"

    intra_op_thread_count: int | None = Field(
        None, ge=0, description="Threads inside one operator; default: the instance's share of the cores."
    )
    inter_op_thread_count: int | None = Field(
        None, ge=0, description="Threads across independent operators; > 1 turns on parallel execution mode."
    )
    graph_optimization_level: Literal["disable", "basic", "extended", "all"] = Field(
        "all", description="ORT graph optimisations to apply when the session is created."
    )
    allow_spinning: bool | None = Field(
        None, description="Whether idle intra/inter-op threads spin-wait (1) or sleep (0); ORT's default spins."
    )
    execution_providers: tuple[str, ...] = Field(
        (), description="Comma list of execution providers in order, e.g. CUDAExecutionProvider; CPU is added."
    )
    log_severity_level: int = Field(4, ge=0, le=4, description="ORT's own log level (4: fatal only).")

    _lower_level = field_validator("graph_optimization_level", mode="before")(_lower)
    _bools = field_validator("allow_spinning", mode="before")(_bool)

    @field_validator("execution_providers", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(p.strip() for p in value.split(",") if p.strip())
        return value


class OpenVinoParameters(ModelParameters):
    """OpenVINO CPU plugin properties (backends/openvino.py); keys as OpenVINO spells them."""

    reader: ClassVar[str] = "openvino"
    threads_field: ClassVar[str | None] = "inference_num_threads"

    performance_hint: Literal["LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT"] = Field(
        "LATENCY", alias="PERFORMANCE_HINT", description="What the plugin tunes streams and threads for."
    )
    num_streams: int | Literal["AUTO"] | None = Field(
        None, alias="NUM_STREAMS", description="Parallel inference streams (a number or AUTO)."
    )
    inference_num_threads: int | None = Field(
        None, ge=0, alias="INFERENCE_NUM_THREADS", description="CPU threads; default: the instance's threads."
    )
    inference_precision_hint: Literal["f32", "bf16", "f16"] = Field(
        "f32", alias="INFERENCE_PRECISION_HINT",
        description="Precision the plugin computes in; f32 matches fp32 references, bf16/f16 trade accuracy.",
    )  # fmt: skip

    hint_bf16: bool | None = Field(
        None, alias="HINT_BF16", description="Triton's key: YES computes in bf16 (INFERENCE_PRECISION_HINT bf16)."
    )
    #: Triton's openvino-backend keys servelab does not implement: set, they fail the load (not ignored)
    refused: ClassVar[dict[str, str]] = {
        "SKIP_OV_DYNAMIC_BATCHSIZE": "servelab always makes a batching model's first dimension dynamic",
        "ENABLE_BATCH_PADDING": "servelab always makes a batching model's first dimension dynamic",
        "RESHAPE_IO_LAYERS": "reshaping I/O layers to the config dims is not implemented",
        "CPU_EXTENSION_PATH": "loading CPU extension libraries is not implemented",
        "COMPILATION_NUM_THREADS": "this OpenVINO's CPU plugin has no such property (2026.4)",
    }

    @classmethod
    def from_map(cls, values: dict[str, str]) -> Self:
        for key, why in cls.refused.items():
            if key in values:
                raise Unsupported(f"openvino parameter {key!r} is set, but servelab does not implement it ({why}); remove it")
        return super().from_map(values)

    @field_validator("hint_bf16", mode="before")
    @classmethod
    def _yes_no(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().upper() in ("YES", "NO"):
            return value.strip().upper() == "YES"
        return _bool(value)

    @property
    def precision(self) -> str:
        """INFERENCE_PRECISION_HINT, with Triton's HINT_BF16=YES meaning bf16."""
        return "bf16" if self.hint_bf16 else self.inference_precision_hint

    @field_validator("performance_hint", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("num_streams", mode="before")
    @classmethod
    def _streams(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            return "AUTO" if text.upper() == "AUTO" else int(text) if text.lstrip("-").isdigit() else text
        return value

    _lower_precision = field_validator("inference_precision_hint", mode="before")(_lower)


class TorchParameters(ModelParameters):
    """PyTorch backend (backends/torch.py)."""

    reader: ClassVar[str] = "pytorch"
    threads_field: ClassVar[str | None] = "intra_op_thread_count"

    intra_op_thread_count: int | None = Field(
        None, ge=1, description="OpenMP threads of the calling thread; default 1 (see the backend's docstring)."
    )


class TensorFlowParameters(ModelParameters):
    """TensorFlow SavedModel backend (backends/tensorflow.py)."""

    reader: ClassVar[str] = "tensorflow"

    signature_name: str = Field("serving_default", min_length=1, description="The SavedModel signature to run.")
    signature_def: str | None = Field(
        None, min_length=1, alias="TF_SIGNATURE_DEF", description="Triton's name for the signature; wins over signature_name."
    )
    graph_tag: str | None = Field(
        None, min_length=1, alias="TF_GRAPH_TAG", description="The meta graph of a SavedModel with several (default: serve)."
    )

    @property
    def signature(self) -> str:
        """The signature to run: Triton's TF_SIGNATURE_DEF, else signature_name."""
        return self.signature_def or self.signature_name


class TensorRTParameters(ModelParameters):
    """TensorRT backend (backends/tensorrt.py): the engine carries its own profiles, precision and workspace
    (``servelab convert --to tensorrt`` sets them when it builds the plan), so no key is read at load."""

    reader: ClassVar[str] = "tensorrt"


def _json_map(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else {}
        except ValueError:
            raise ValueError("a JSON object") from None
    return value


class TorchServeHandlerParameters(ModelParameters):
    """A TorchServe model (backends/torchserve_handler.py) and what TorchServe's front doors show of it.

    Written by the TorchServe model store reader (repository/torchserve_layout.py) and by
    ``servelab import torchserve``, read by the backend and the TorchServe front doors.
    """

    reader: ClassVar[str] = "torchserve_handler"

    handler: str | None = Field(
        None, min_length=1, alias="torchserve_handler", description="Handler entry point; overrides MANIFEST.json's."
    )
    envelope: str | None = Field(
        None, min_length=1, alias="torchserve_envelope", description="TorchServe request envelope (e.g. 'json', 'kservev2')."
    )
    version_numbers: dict[str, int] = Field(
        default_factory=dict, alias="torchserve_versions",
        description="TorchServe version (MANIFEST modelVersion, e.g. '1.0') -> servelab version number.",
    )
    default_version: str | None = Field(
        None, min_length=1, alias="torchserve_default_version", description="The version TorchServe's APIs use by default."
    )
    urls: dict[str, str] = Field(
        default_factory=dict, alias="torchserve_urls", description="TorchServe version -> its archive in the model store."
    )
    max_workers: int | None = Field(None, ge=1, alias="torchserve_max_workers", description="model-config.yaml maxWorkers.")
    max_batch_delay_ms: int | None = Field(
        None, ge=0, alias="torchserve_max_batch_delay_ms", description="maxBatchDelay (ms), also when batchSize is 1."
    )
    response_timeout_s: int | None = Field(
        None, ge=0, alias="torchserve_response_timeout_s", description="model-config.yaml responseTimeout (seconds)."
    )

    _json = field_validator("version_numbers", "urls", mode="before")(_json_map)

    def to_map(self) -> dict[str, str]:
        values = super().to_map()
        for field, key in (("version_numbers", "torchserve_versions"), ("urls", "torchserve_urls")):
            if getattr(self, field):
                values[key] = json.dumps(getattr(self, field), sort_keys=True)
        return values

    def servelab_version(self, version: str) -> str:
        """The servelab version of a TorchServe version string ("" -> the default; a number passes)."""
        version = version or self.default_version or ""
        if version in self.version_numbers:
            return str(self.version_numbers[version])
        return version

    def torchserve_version(self, version: int) -> str:
        """The TorchServe version string of a servelab version number."""
        for text, number in self.version_numbers.items():
            if number == version:
                return text
        return str(version)


class PythonParameters(ModelParameters):
    """A python model (backends/python.py): what its author declares about ``execute``."""

    reader: ClassVar[str] = "python backend"

    never_blocks: bool = Field(
        False, alias="execute_never_blocks",
        description=(
            "execute() only computes: no sleep, I/O, lock, queue or BLS call to a model that may block, and "
            "it is safe to call from any thread. Its instances in threads (instance_mode thread) may then run "
            "a fast request on the event loop itself (inline_execution_us), without the hop to a worker "
            "thread. Ignored for async def execute, decoupled models and worker processes."
        ),
    )

    _bool_never_blocks = field_validator("never_blocks", mode="before")(_bool)


class SchedulerParameters(ModelParameters):
    """How a loaded version is scheduled (core/batching/factory.py, core/scheduling/)."""

    reader: ClassVar[str] = "scheduler"

    instance_mode: Literal["auto", "thread", "process"] = Field(
        "auto", description="Instances as threads, worker processes, or by the runtime (GIL-holding: processes)."
    )
    inline_execution_us: float | None = Field(
        None, ge=0, description="Models faster than this run on the event loop (no thread hop); 0 turns it off."
    )
    idle_inline_execution_us: float | None = Field(
        None, ge=0, description="Models up to this run on the loop while it is idle; 0 turns it off."
    )

    _lower_mode = field_validator("instance_mode", mode="before")(_lower)


#: config ``backend:`` name -> its parameter schema
BACKEND_PARAMETERS: dict[str, type[ModelParameters]] = {
    "onnxruntime": OnnxRuntimeParameters,
    "openvino": OpenVinoParameters,
    "python": PythonParameters,
    "pytorch": TorchParameters,
    "tensorflow": TensorFlowParameters,
    "tensorrt": TensorRTParameters,
    "torchserve_handler": TorchServeHandlerParameters,
}


def parameters_for(backend: str) -> type[ModelParameters]:
    """The schema of ``backend``; InvalidArgument naming the known backends otherwise."""
    if backend not in BACKEND_PARAMETERS:
        raise InvalidArgument(
            f"no parameter schema for backend {backend!r}; expected one of {sorted(BACKEND_PARAMETERS)}"
        )
    return BACKEND_PARAMETERS[backend]
