"""Helpers the runtime backends share: tensor specs read from model files, config auto-complete
and model-file lookup (typed parameters: backends/parameters.py).

Auto-complete follows Triton's rules. A model *batches* when every input and output has rank >= 1
and a dynamic (-1 / symbolic) first dimension. When the config gives ``max_batch_size: 0`` (the
proto3 default, so indistinguishable from "not given") and the model batches, auto-complete sets
``max_batch_size`` to :data:`DEFAULT_MAX_BATCH_SIZE` (4, as Triton does, so one repository behaves
the same on both servers) and drops the batch dimension from ``dims`` -- unless the user wrote a
tensor whose dims already have the model's full rank, which states that the model is served
without batching.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc
from servelab.trust import version_file
from servelab.types import DataType

__all__ = [
    "DEFAULT_MAX_BATCH_SIZE",
    "TensorSpec",
    "complete_config",
    "config_dtype",
    "model_file",
    "sequence_tensors",
    "to_config_dtype",
]

DEFAULT_MAX_BATCH_SIZE = 4


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One model tensor as the runtime sees it: full shape, -1 for a dynamic dimension."""

    name: str
    dtype: DataType
    shape: tuple[int, ...]


def config_dtype(value: int) -> DataType:
    """The DataType of a config ``data_type`` enum value."""
    return DataType.from_triton(mc.DataType.Name(value))


def to_config_dtype(dtype: DataType) -> int:
    """The config ``data_type`` enum value of a DataType."""
    return int(mc.DataType.Value(dtype.triton_name))


def model_file(config: mc.ModelConfig, version_dir: Path, *defaults: str) -> Path:
    """The model file: the config's ``default_model_filename``, else the first default that exists.

    Either must stay inside the model's folder (:func:`servelab.trust.version_file`), checked before
    the runtime opens it; messages name the file relative to the version folder, not the server path.
    """
    if config.default_model_filename:
        path = version_file(version_dir, config.default_model_filename, "default_model_filename")
        if not path.exists():
            raise InvalidArgument(
                f"model file {version_dir.name}/{config.default_model_filename} (default_model_filename) "
                "does not exist"
            )
        return path
    for name in defaults:
        path = version_file(version_dir, name, "model file")
        if path.exists():
            return path
    raise InvalidArgument(f"no model file in version folder {version_dir.name}; expected one of {list(defaults)}")


def control_dtype(control: mc.ModelSequenceBatching.Control) -> DataType:
    """The datatype of a sequence control tensor: from its false/true pair, or ``data_type`` (CORRID)."""
    if control.int32_false_true:
        return DataType.INT32
    if control.fp32_false_true:
        return DataType.FP32
    if control.bool_false_true:
        return DataType.BOOL
    if control.data_type == mc.TYPE_INVALID:
        raise InvalidArgument(
            f"sequence control {mc.ModelSequenceBatching.Control.Kind.Name(control.kind)} has no datatype: set "
            "int32_false_true, fp32_false_true or bool_false_true (START, END, READY) or data_type (CORRID)"
        )
    return config_dtype(control.data_type)


def sequence_tensors(config: mc.ModelConfig) -> tuple[dict[str, DataType], frozenset[str]]:
    """The inputs the sequence batcher supplies (control and implicit-state inputs -> datatype) and the
    implicit-state outputs. Clients never send those inputs, so auto-complete leaves them out of
    ``input``; a state output is a client output only where ``output`` lists it (as in Triton)."""
    if not config.HasField("sequence_batching"):
        return {}, frozenset()
    sb = config.sequence_batching
    inputs: dict[str, DataType] = {}
    for ci in sb.control_input:
        for control in ci.control:
            inputs[ci.name] = control_dtype(control)
    for state in sb.state:
        if state.data_type != mc.TYPE_INVALID:
            inputs[state.input_name] = config_dtype(state.data_type)
    return inputs, frozenset(s.output_name for s in sb.state)


def model_batches(specs: list[TensorSpec]) -> bool:
    """True when every tensor has a dynamic first dimension (the batch axis)."""
    return bool(specs) and all(len(s.shape) >= 1 and s.shape[0] < 0 for s in specs)


def complete_config(config: mc.ModelConfig, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> None:
    """Fill missing tensors, data types, dims and max_batch_size in place; check what is given.

    A sequence model's control and state inputs come from the sequence batcher, and its state outputs
    go back to it: they are checked against the model (batch axis included) but never added to
    ``input`` / ``output``; a state output the config lists itself is completed like any output.
    """
    supplied, state_outputs = sequence_tensors(config)
    listed = {t.name for t in config.output}
    hidden = [s for s in inputs if s.name in supplied] + [s for s in outputs if s.name in state_outputs and s.name not in listed]
    inputs = [s for s in inputs if s.name not in supplied]
    outputs = [s for s in outputs if s.name not in state_outputs or s.name in listed]
    everything = inputs + outputs + hidden
    full_rank_given = any(
        len(t.dims) == len(s.shape) and len(s.shape) > 0
        for field, specs in ((config.input, inputs), (config.output, outputs))
        for t in field
        for s in specs
        if s.name == t.name
    )
    if config.max_batch_size > 0:
        for s in everything:
            if len(s.shape) == 0 or s.shape[0] >= 0:
                first = s.shape[0] if s.shape else "none (scalar)"
                raise InvalidArgument(
                    f"config sets max_batch_size {config.max_batch_size} but model tensor '{s.name}' has "
                    f"a fixed first dimension ({first}); set max_batch_size: 0 or export with a dynamic batch"
                )
    elif model_batches(everything) and not full_rank_given:
        config.max_batch_size = DEFAULT_MAX_BATCH_SIZE
    skip = 1 if config.max_batch_size > 0 else 0
    _complete_field(config.input, inputs, skip, "input")
    _complete_field(config.output, outputs, skip, "output")


def _complete_field(field: Any, specs: list[TensorSpec], skip: int, kind: str) -> None:
    by_name = {s.name: s for s in specs}
    for given in field:
        if given.name not in by_name:
            raise InvalidArgument(
                f"config {kind} '{given.name}' is not in the model; the model's {kind}s are {sorted(by_name)}"
            )
    present = {t.name for t in field}
    for spec in specs:
        if spec.name not in present:
            field.add(name=spec.name)
    for tensor in field:
        _complete_tensor(tensor, by_name[tensor.name], skip, kind)


def _complete_tensor(tensor: Any, spec: TensorSpec, skip: int, kind: str) -> None:
    model_dims = list(spec.shape[skip:])
    dtype_value = to_config_dtype(spec.dtype)
    if tensor.data_type == mc.TYPE_INVALID:
        tensor.data_type = dtype_value
    elif tensor.data_type != dtype_value:
        raise InvalidArgument(
            f"{kind} '{spec.name}': config data_type {mc.DataType.Name(tensor.data_type)} "
            f"but the model has {spec.dtype.triton_name}"
        )
    dims = list(tensor.dims)
    if tensor.HasField("reshape"):  # Triton: the model sees ``reshape``; ``dims`` is what clients send
        dims = list(tensor.reshape.shape)
    if not dims and model_dims and not tensor.HasField("reshape"):
        tensor.dims.extend(model_dims)
        return
    if len(dims) != len(model_dims):
        raise InvalidArgument(
            f"{kind} '{spec.name}': config dims {dims} (rank {len(dims)}) but the model has shape "
            f"{list(spec.shape)}, i.e. dims {model_dims} (rank {len(model_dims)})"
            + (" after dropping the batch dimension" if skip else "")
        )
    for given, actual in zip(dims, model_dims, strict=True):
        if given >= 0 and actual >= 0 and given != actual:
            raise InvalidArgument(
                f"{kind} '{spec.name}': config dims {dims} but the model has dims {model_dims}"
            )
