"""Which config.pbtxt fields servelab honours, ignores (and why) or refuses: the one table.

Every field of Triton's ModelConfig is classified here (tests/unit/repository/test_config_fields.py
fails when the .proto grows a field this table does not name). A field counts as *used* when the config
sets it to something other than its default; a message set empty (``direct {}``) counts too. For each
used field the most specific entry decides, by dotted path (``instance_group.rate_limiter``):

- SUPPORTED: servelab does what Triton does with it (``backends`` narrows that to the backends that
  read it; for any other backend it is IGNORED, as Triton's backends ignore what they do not read).
- IGNORED: accepted and logged once at load with the reason; the model behaves as Triton behaves on a
  host without GPUs (GPU-only settings of a repository shared with a GPU fleet are the common case).
- REFUSED: the load fails with Unsupported naming the field and saying servelab does not implement it.
  Accepting it silently would serve something other than what the config asks for.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import Any

from google.protobuf.message import Message

from servelab.errors import Unsupported
from servelab.protocol import model_config_pb2 as mc

__all__ = ["FIELDS", "Rule", "Support", "check_fields", "rule_for", "used_fields"]

log = logging.getLogger("servelab.repository")


class Support(str, Enum):
    SUPPORTED = "supported"
    IGNORED = "ignored"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Rule:
    support: Support
    reason: str
    #: SUPPORTED only by these backends (None: by all); IGNORED for the others
    backends: frozenset[str] | None = None


def _ok(reason: str, *backends: str) -> Rule:
    return Rule(Support.SUPPORTED, reason, frozenset(backends) if backends else None)


def _ignored(reason: str) -> Rule:
    return Rule(Support.IGNORED, reason)


def _refused(reason: str) -> Rule:
    return Rule(Support.REFUSED, reason)


_RAGGED = "ragged batching (batch_input / batch_output / allow_ragged_batch) is not implemented"
_CPU = "on CPU instances (this host: no CUDA device is used)"

#: dotted field path -> what servelab does with it; children inherit their parent's rule unless listed
FIELDS: dict[str, Rule] = {
    "name": _ok("the model's folder name"),
    "platform": _ok("picks the backend (onnxruntime_onnx, pytorch_libtorch, tensorrt_plan, ...)"),
    "backend": _ok("picks the backend"),
    "runtime": _refused("backend runtimes (a python-based backend's own model.py) are not implemented"),
    "version_policy": _ok("latest / all / specific"),
    "max_batch_size": _ok("batching and validation"),
    "input": _ok("validated per request"),
    "input.format": _ok("reported as given; like Triton, no layout conversion happens"),
    "input.is_shape_tensor": _refused("shape tensors (TensorRT) are not implemented"),
    "input.allow_ragged_batch": _refused(_RAGGED),
    "input.is_non_linear_format_io": _refused("TensorRT non-linear I/O formats are not implemented"),
    "output": _ok("selected and reshaped per response"),
    "output.is_shape_tensor": _refused("shape tensors (TensorRT) are not implemented"),
    "output.is_non_linear_format_io": _refused("TensorRT non-linear I/O formats are not implemented"),
    "batch_input": _refused(_RAGGED),
    "batch_output": _refused(_RAGGED),
    "optimization": _ok("see its fields"),
    "optimization.graph": _ok(
        "ONNX Runtime graph optimisation level (Triton's mapping: -1 basic, 1 extended, 2 none, else all)",
        "onnxruntime",
    ),
    "optimization.priority": _ignored(
        "Triton sets its scheduler threads' nice level; servelab's threads share one interpreter lock, "
        "so a nice level would not order them"
    ),
    "optimization.cuda": _refused("CUDA graphs and CUDA stream options are not implemented"),
    "optimization.execution_accelerators": _ok(
        "ONNX Runtime execution providers: cpu 'openvino' (OpenVINOExecutionProvider, refused where this "
        "onnxruntime lacks it, as in Triton); gpu 'tensorrt' / 'cuda' apply to GPU instances only, as in Triton",
        "onnxruntime",
    ),
    "optimization.input_pinned_memory": _ignored(f"CUDA pinned host memory for GPU copies: none {_CPU}"),
    "optimization.output_pinned_memory": _ignored(f"CUDA pinned host memory for GPU copies: none {_CPU}"),
    "optimization.gather_kernel_buffer_threshold": _ignored(f"a GPU gather kernel of Triton's TensorRT backend: none {_CPU}"),
    "optimization.eager_batching": _ignored(
        "read only by Triton's TensorRT backend; servelab forms the next batch when an instance is free"
    ),
    "dynamic_batching": _ok("the dynamic batcher (core/batching)"),
    "sequence_batching": _ok("the sequence batcher: direct and oldest, controls, implicit state (core/batching)"),
    "sequence_batching.iterative_sequence": _refused("iterative sequences (requests the model reschedules) are not implemented"),
    "sequence_batching.state.use_same_buffer_for_input_output": _ignored(
        "a memory layout option: servelab hands the output state back as the next input; the model sees the same values"
    ),
    "sequence_batching.state.use_growable_memory": _refused("growable CUDA state buffers are not implemented"),
    "ensemble_scheduling": _ok("the ensemble backend"),
    "ensemble_scheduling.step.model_namespace": _refused("model namespacing is not implemented"),
    "ensemble_scheduling.max_inflight_requests": _ignored(
        "servelab runs an ensemble's steps one after another per request, so no step can run ahead of the next"
    ),
    "instance_group": _ok("instance count per version"),
    "instance_group.kind": _ok(
        "KIND_CPU / KIND_MODEL / KIND_AUTO run on the CPU; KIND_GPU uses a GPU where the backend has one "
        "(onnxruntime's CUDA / TensorRT providers, tensorrt) and the CPU otherwise, so a repository shared "
        "with a GPU fleet loads here"
    ),
    "instance_group.gpus": _ignored(f"device ids of GPU instances: the backend picks its device {_CPU}"),
    "instance_group.rate_limiter": _refused("the rate limiter (resources, priority) is not implemented"),
    "instance_group.secondary_devices": _refused("secondary devices (NVDLA) are not implemented"),
    "instance_group.profile": _refused("TensorRT optimisation profile selection per instance group is not implemented"),
    "instance_group.passive": _refused("passive instances are not implemented"),
    "instance_group.host_policy": _refused("host policies (Triton's --host-policy) are not implemented"),
    "default_model_filename": _ok("the model file in each version folder"),
    "cc_model_filenames": _ignored(f"CUDA compute capability model files: default_model_filename is loaded {_CPU}"),
    "metric_tags": _refused("metric tags are not implemented: servelab's metrics carry model and version labels"),
    "parameters": _ok("typed per backend and scheduler (backends/parameters.py)"),
    "model_warmup": _ok("run on every instance before the version is ready"),
    "model_operations": _refused("custom operation libraries (op_library_filename) are not implemented"),
    "model_transaction_policy": _ok("see its fields"),
    "model_transaction_policy.decoupled": _ok("zero, one or many responses per request through pb_utils' response sender, over gRPC ModelStreamInfer", "python"),
    "model_repository_agents": _refused("repository agents (e.g. checksum, encryption) are not implemented"),
    "response_cache": _ok("the response cache (not with sequence_batching: answers depend on the sequence)"),
    "model_metrics": _refused("per-family histogram buckets (model_metrics) are not implemented"),
}


def rule_for(path: str) -> tuple[str, Rule]:
    """The most specific entry for a dotted field path: (the entry's path, its rule)."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        key = ".".join(parts[:end])
        if key in FIELDS:
            return key, FIELDS[key]
    raise KeyError(f"config field {path!r} is not classified in servelab.repository.fields.FIELDS")


def used_fields(message: Message, prefix: str = "") -> list[str]:
    """Dotted paths of the fields ``message`` sets (leaves, and messages set empty), in field order."""
    found: list[str] = []
    for field, value in message.ListFields():
        path = f"{prefix}{field.name}"
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            found.extend(_map_paths(path, field, value))
        elif field.message_type is not None:
            items = list(value) if field.is_repeated else [value]
            below = [p for item in items for p in used_fields(item, f"{path}.")]
            found.extend(dict.fromkeys(below) if below else [path])
        else:
            found.append(path)
    return list(dict.fromkeys(found))


def _map_paths(path: str, field: Any, value: Any) -> list[str]:
    """A map counts as one leaf, or as its message values' fields (``model_warmup.inputs`` ...)."""
    value_type = field.message_type.fields_by_name["value"].message_type
    if value_type is None or not value:
        return [path] if value else []
    below = [p for item in value.values() for p in used_fields(item, f"{path}.")]
    return below or [path]


def check_fields(config: mc.ModelConfig, backend: str) -> list[str]:
    """Refuse what servelab does not implement; returns the notes on ignored fields (for the log)."""
    notes: list[str] = []
    for path in used_fields(config):
        key, rule = rule_for(path)
        if rule.support is Support.REFUSED:
            raise Unsupported(
                f"model '{config.name}': config field '{key}' is set, but servelab does not implement it "
                f"({rule.reason}); remove it from config.pbtxt"
            )
        ignored = rule.support is Support.IGNORED or (rule.backends is not None and backend not in rule.backends)
        if ignored:
            why = rule.reason if rule.support is Support.IGNORED else f"only {', '.join(sorted(rule.backends or ()))} reads it"
            notes.append(f"'{key}' is ignored: {why}")
    notes = list(dict.fromkeys(notes))
    for note in notes:
        log.info("model %s: config field %s", config.name, note)
    return notes
