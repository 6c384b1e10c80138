"""The sequence batcher's settings, read and checked once from a ModelConfig's ``sequence_batching``.

Also the per-request view of a sequence (``sequence_id``, ``sequence_start``, ``sequence_end`` request
parameters, as REST and gRPC decode them) and the tensors the batcher hands the model: the control
inputs (START, END, READY, CORRID) and the initial implicit state. Every error names the config field or
the request parameter, what was expected and what came; Triton's texts where clients match on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from servelab.backends._specs import config_dtype, control_dtype
from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc
from servelab.repository.defaults import DEFAULT_SEQUENCE_IDLE_US
from servelab.trust import resolve_inside
from servelab.types import DataType

__all__ = ["INITIAL_STATE_FOLDER", "Control", "SequenceId", "SequencePolicy", "SequenceRequest", "StateSpec"]

INITIAL_STATE_FOLDER = "initial_state"
Kind = mc.ModelSequenceBatching.Control.Kind
START, READY, END, CORRID = Kind.CONTROL_SEQUENCE_START, Kind.CONTROL_SEQUENCE_READY, Kind.CONTROL_SEQUENCE_END, Kind.CONTROL_SEQUENCE_CORRID
_CORRID_TYPES = (DataType.UINT64, DataType.INT64, DataType.UINT32, DataType.INT32, DataType.BYTES)
_UINT64_MAX = 2**64 - 1
SequenceId = int | str


@dataclass(frozen=True, slots=True)
class Control:
    """One control input: the model input ``name`` carries ``kind`` as ``dtype``."""

    name: str
    kind: int
    dtype: DataType
    false: Any = 0
    true: Any = 1

    def flag(self, on: bool, batched: bool) -> np.ndarray:
        """START / END / READY as a one-element tensor ([1, 1] with the batch dimension)."""
        shape = (1, 1) if batched else (1,)
        return np.full(shape, self.true if on else self.false, dtype=self.dtype.numpy_dtype)

    def corrid(self, sequence: SequenceId, batched: bool, model: str) -> np.ndarray:
        """CORRID: the id (32-bit types keep its low 32 bits, as in Triton); TYPE_STRING: its text."""
        shape = (1, 1) if batched else (1,)
        if self.dtype is DataType.BYTES:
            return np.full(shape, str(sequence).encode(), dtype=object)
        number = _as_number(sequence, self.name, model)
        wrapped = np.array([number], dtype=np.uint64)
        if self.dtype.itemsize == 4:
            wrapped = wrapped.astype(np.uint32)
        return wrapped.view(self.dtype.numpy_dtype).reshape(shape)


@dataclass(frozen=True, slots=True)
class StateSpec:
    """One implicit state: ``output_name`` of a request is ``input_name`` of the sequence's next one."""

    input_name: str
    output_name: str
    dtype: DataType
    #: the initial state without the batch dimension: the config's initial_state, else zeros with 1 for
    #: every variable dimension (Triton leaves it uninitialised; zeros are one such value)
    initial: np.ndarray


@dataclass(frozen=True, slots=True)
class SequenceRequest:
    """The sequence parameters of one request."""

    sequence_id: SequenceId
    start: bool
    end: bool


@dataclass(frozen=True, slots=True)
class SequencePolicy:
    model: str
    strategy: Literal["direct", "oldest"]
    batched: bool
    #: rows of one execution (1 for a model without batching)
    max_batch_size: int
    #: sequences one instance holds at a time (batch slots, or oldest's candidate sequences)
    slots: int
    idle_ns: int
    controls: tuple[Control, ...]
    states: tuple[StateSpec, ...]
    #: state outputs that are also client outputs (listed under ``output``): not stripped from answers
    state_outputs_shown: frozenset[str]
    #: direct: wait up to this for more ready slots, unless minimum_slot_utilization is reached
    max_delay_ns: int = 0
    min_slot_utilization: float = 0.0
    #: oldest: preferred batch sizes, ascending
    preferred: tuple[int, ...] = ()

    @property
    def target(self) -> int:
        """oldest: the batch size at which waiting stops at once."""
        return self.preferred[-1] if self.preferred else self.max_batch_size

    @classmethod
    def from_config(cls, config: mc.ModelConfig, model_dir: Path | None) -> SequencePolicy:
        sb = config.sequence_batching
        where = f"model '{config.name}': sequence_batching"
        if config.response_cache.enable:
            raise InvalidArgument(
                f"model '{config.name}': response_cache cannot serve a sequence model (an answer depends on "
                "the sequence's earlier requests); remove response_cache or sequence_batching"
            )
        batched = config.max_batch_size > 0
        max_batch = config.max_batch_size if batched else 1
        oldest = sb.WhichOneof("strategy_choice") == "oldest"
        slots = max_batch
        if oldest and sb.oldest.max_candidate_sequences > 0:
            slots = sb.oldest.max_candidate_sequences
        states = tuple(_state(s, config, model_dir, f"{where}.state '{s.input_name}'") for s in sb.state)
        listed = {o.name for o in config.output}
        common: dict[str, Any] = {
            "model": config.name, "batched": batched, "max_batch_size": max_batch, "slots": slots,
            "idle_ns": (sb.max_sequence_idle_microseconds or DEFAULT_SEQUENCE_IDLE_US) * 1000,
            "controls": _controls(config, where), "states": states,
            "state_outputs_shown": frozenset(s.output_name for s in states if s.output_name in listed),
        }  # fmt: skip
        if oldest:
            preferred = sorted(set(sb.oldest.preferred_batch_size))
            bad = [p for p in preferred if not 0 < p <= max_batch]
            if bad:
                raise InvalidArgument(f"{where}.oldest.preferred_batch_size {bad} must lie in 1..{max_batch} (max_batch_size)")
            return cls(strategy="oldest", max_delay_ns=sb.oldest.max_queue_delay_microseconds * 1000,
                       preferred=tuple(preferred), **common)  # fmt: skip
        utilization = sb.direct.minimum_slot_utilization
        if not 0.0 <= utilization <= 1.0:
            raise InvalidArgument(f"{where}.direct.minimum_slot_utilization must lie in 0..1, got {utilization}")
        return cls(strategy="direct", max_delay_ns=sb.direct.max_queue_delay_microseconds * 1000,
                   min_slot_utilization=utilization, **common)  # fmt: skip

    def request(self, parameters: dict[str, Any], rows: int) -> SequenceRequest:
        """The sequence parameters of a request; InvalidArgument (Triton's texts) when they are wrong."""
        sequence = _sequence_id(parameters.get("sequence_id", 0))
        start = _flag(parameters, "sequence_start")
        end = _flag(parameters, "sequence_end")
        if sequence in (0, ""):
            raise InvalidArgument(
                f"inference request to model '{self.model}' must specify a non-zero or non-empty correlation ID "
                "(request parameter sequence_id)"
            )
        if rows != 1:
            raise InvalidArgument(
                f"inference request to model '{self.model}' must specify batch-size 1 due to requirements of "
                f"sequence batcher (got {rows} rows)"
            )
        return SequenceRequest(sequence, start, end)

    def check_id(self, sequence: SequenceId) -> None:
        """Fail a request now whose id the model's CORRID input cannot carry (not at execution)."""
        for c in self.controls:
            if c.kind == CORRID and c.dtype is not DataType.BYTES:
                _as_number(sequence, c.name, self.model)


def _sequence_id(value: Any) -> SequenceId:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidArgument(
            f"request parameter 'sequence_id' must be an unsigned integer or a string, got {value!r}"
        )
    if isinstance(value, int) and not 0 <= value <= _UINT64_MAX:
        raise InvalidArgument(f"request parameter 'sequence_id' must lie in 0..2**64-1, got {value}")
    return value


def _flag(parameters: dict[str, Any], key: str) -> bool:
    value = parameters.get(key, False)
    if not isinstance(value, bool):
        raise InvalidArgument(f"request parameter '{key}' must be true or false, got {value!r}")
    return value


def _as_number(sequence: SequenceId, control: str, model: str) -> int:
    if isinstance(sequence, int):
        return sequence
    if sequence.isascii() and sequence.isdigit() and int(sequence) <= _UINT64_MAX:
        return int(sequence)
    raise InvalidArgument(
        f"model '{model}': sequence_id {sequence!r} is not a number, but the CORRID control input '{control}' "
        "is an integer tensor; send a numeric id or declare CORRID with data_type TYPE_STRING"
    )


def _controls(config: mc.ModelConfig, where: str) -> tuple[Control, ...]:
    inputs = {t.name for t in config.input}
    seen: dict[int, str] = {}
    out: list[Control] = []
    for ci in config.sequence_batching.control_input:
        here = f"{where}.control_input '{ci.name}'"
        if not ci.name:
            raise InvalidArgument(f"{where}.control_input: an entry has no name")
        if ci.name in inputs:
            raise InvalidArgument(f"{here} is also listed under input; the sequence batcher supplies it, remove it there")
        if len(ci.control) != 1:
            raise InvalidArgument(f"{here} must hold exactly one control, got {len(ci.control)}")
        control = ci.control[0]
        kind = Kind.Name(control.kind)
        if control.kind in seen:
            raise InvalidArgument(f"{where}: {kind} is given twice ('{seen[control.kind]}' and '{ci.name}')")
        seen[control.kind] = ci.name
        out.append(_control(ci.name, control, f"{here} ({kind})"))
    return tuple(out)


def _control(name: str, control: mc.ModelSequenceBatching.Control, here: str) -> Control:
    pairs = [p for p in (control.int32_false_true, control.fp32_false_true, control.bool_false_true) if p]
    if control.kind == CORRID:
        if pairs:
            raise InvalidArgument(f"{here}: CORRID takes data_type, not a false/true pair")
        dtype = control_dtype(control)
        if dtype not in _CORRID_TYPES:
            raise InvalidArgument(
                f"{here}: data_type {dtype.triton_name}; expected TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 "
                "or TYPE_STRING"
            )
        return Control(name, control.kind, dtype)
    if len(pairs) != 1 or len(pairs[0]) != 2:
        raise InvalidArgument(
            f"{here}: set exactly one of int32_false_true, fp32_false_true or bool_false_true, with two values "
            "(false first, then true)"
        )
    if control.data_type != mc.TYPE_INVALID:
        raise InvalidArgument(f"{here}: data_type is for CORRID; START, END and READY take a false/true pair")
    false, true = pairs[0]
    return Control(name, control.kind, control_dtype(control), false, true)


def _state(
    state: mc.ModelSequenceBatching.State, config: mc.ModelConfig, model_dir: Path | None, where: str
) -> StateSpec:
    if not state.input_name or not state.output_name:
        raise InvalidArgument(f"{where}: a state needs input_name and output_name")
    if state.input_name in {t.name for t in config.input}:
        raise InvalidArgument(f"{where}: input_name is also listed under input; the sequence batcher supplies it")
    if state.data_type == mc.TYPE_INVALID:
        raise InvalidArgument(f"{where}: has no data_type")
    if not state.dims:
        raise InvalidArgument(f"{where}: has no dims; add e.g. dims: [ -1 ]")
    dtype = config_dtype(state.data_type)
    dims = tuple(int(d) for d in state.dims)
    if len(state.initial_state) > 1:
        raise InvalidArgument(
            f"{where}: initial_state must contain exactly one or zero element, found {len(state.initial_state)}"
        )
    if not state.initial_state:
        return StateSpec(state.input_name, state.output_name, dtype, _zeros(dtype, tuple(d if d > 0 else 1 for d in dims)))
    return StateSpec(state.input_name, state.output_name, dtype, _initial(state, dtype, dims, model_dir, where))


def _initial(
    state: mc.ModelSequenceBatching.State, dtype: DataType, dims: tuple[int, ...], model_dir: Path | None, where: str
) -> np.ndarray:
    init = state.initial_state[0]
    here = f"{where}.initial_state"
    if init.data_type != state.data_type:
        raise InvalidArgument(f"{here}: data_type {mc.DataType.Name(init.data_type)} differs from the state's {dtype.triton_name}")
    if not init.name:
        raise InvalidArgument(f"{here}: field 'name' must be set")
    shape = tuple(int(d) for d in init.dims)
    if len(shape) != len(dims):
        raise InvalidArgument(f"{here}: dims {list(shape)} must have the rank of the state's dims {list(dims)}")
    if any(d < 0 for d in shape) or any(s != d for s, d in zip(shape, dims, strict=True) if d >= 0):
        raise InvalidArgument(f"{here}: dims {list(shape)} must be concrete and match the state's dims {list(dims)}")
    choice = init.WhichOneof("state_data")
    if choice == "zero_data":
        return _zeros(dtype, shape)
    if choice != "data_file":
        raise InvalidArgument(f"{here}: set zero_data or data_file")
    if model_dir is None or dtype is DataType.BYTES:
        raise InvalidArgument(f"{here}: data_file needs a numeric state read from the model's folder")
    folder = resolve_inside(model_dir, INITIAL_STATE_FOLDER, f"{INITIAL_STATE_FOLDER} folder")
    path = resolve_inside(model_dir, init.data_file, "initial_state data_file", start=folder)
    raw = path.read_bytes() if path.is_file() else b""
    need = int(np.prod(shape, dtype=np.int64)) * (dtype.itemsize or 1)
    if len(raw) < need:
        raise InvalidArgument(
            f"{here}: {INITIAL_STATE_FOLDER}/{init.data_file} has {len(raw)} bytes; dims {list(shape)} need {need}"
        )
    return np.frombuffer(raw[:need], dtype=dtype.numpy_dtype).reshape(shape).copy()


def _zeros(dtype: DataType, shape: tuple[int, ...]) -> np.ndarray:
    if dtype is DataType.BYTES:
        return np.full(shape, b"", dtype=object)
    return np.zeros(shape, dtype=dtype.numpy_dtype)
