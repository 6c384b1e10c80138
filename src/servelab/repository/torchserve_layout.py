"""How a TorchServe model (its archives in the store, one per version) becomes one servelab model config.

The model runs on the ``torchserve_handler`` backend with the tensors of
:mod:`servelab.protocol.torchserve_envelope`. TorchServe's knobs are taken with TorchServe's precedence,
``model-config.yaml`` (when positive) over config.properties ``models={...}`` over the defaults:

- ``batchSize`` -> ``max_batch_size``; above 1 also ``dynamic_batching`` with
  ``maxBatchDelay`` (ms) as ``max_queue_delay_microseconds``: servelab's batcher forms the batches.
- ``minWorkers`` -> ``instance_group { count }`` worker processes (capped by
  ``workers.max_workers_per_model``); ``maxWorkers`` is kept for describe (servelab does not autoscale).
- ``responseTimeout`` is kept for describe and compared with the server's request timeout.
- Versions: each archive's ``modelVersion`` string (``"1.0"``) gets a servelab version number in
  ascending order; the map and the default version (``defaultVersion`` in ``models``, else the lowest)
  are parameters the TorchServe front doors read.

What servelab does not do is named in :attr:`ModelPlan.notes` (logged once, listed by the import):
parallelism (``parallelType``/``parallelLevel``, torchrun), GPU placement, continuous or sequence
batching, per-model virtual environments, job queue sizes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from servelab.backends.parameters import SchedulerParameters, TorchServeHandlerParameters
from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc
from servelab.protocol.torchserve_envelope import BODY, REQUEST, RESPONSE, RESPONSE_META
from servelab.repository.torchserve_archive import StoreEntry

__all__ = ["BACKEND", "DEFAULT_BATCH_DELAY_MS", "ModelPlan", "TorchServeKnobs", "plan_model", "version_key"]

BACKEND = "torchserve_handler"
DEFAULT_BATCH_DELAY_MS = 100
_UNSUPPORTED = {
    "parallelType": "model parallelism (parallelType/parallelLevel, torchrun) is left out: each worker runs the whole model in one process",
    "parallelLevel": "model parallelism (parallelType/parallelLevel, torchrun) is left out: each worker runs the whole model in one process",
    "torchrun": "torchrun (distributed workers) is left out: each worker runs the whole model in one process",
    "deviceIds": "deviceIds (GPU placement) is left out: handlers run on the CPU",
    "continuousBatching": "continuousBatching is left out: requests are batched by servelab's dynamic batcher",
    "sequenceBatching": "sequenceBatching (stateful models) is left out",
    "useVenv": "useVenv (a virtual environment per model) is left out: handlers import from servelab's environment",
    "jobQueueSize": "jobQueueSize is left out: servelab's queue has its own bound",
    "asyncCommunication": "asyncCommunication is left out: handlers answer each batch synchronously",
}


@dataclass(frozen=True)
class TorchServeKnobs:
    """TorchServe's per-model settings after precedence."""

    batch_size: int = 1
    max_batch_delay_ms: int = DEFAULT_BATCH_DELAY_MS
    min_workers: int = 1
    max_workers: int = 1
    response_timeout_s: int = 120


@dataclass
class ModelPlan:
    """One servelab model of a TorchServe store: its config and where each version's archive is."""

    name: str
    config: mc.ModelConfig
    #: servelab version -> store entry
    versions: dict[int, StoreEntry]
    knobs: TorchServeKnobs
    notes: list[str] = field(default_factory=list)


def version_key(version: str) -> tuple[Any, ...]:
    """Natural order of TorchServe version strings ("1.0" < "1.10" < "2.0")."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", version) if p)


def _positive(source: dict[str, Any], key: str) -> int | None:
    value = source.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value > 0 else None


def _knobs(entry: StoreEntry, from_properties: dict[str, Any], default_workers: int, timeout_s: int) -> TorchServeKnobs:
    yaml_ = entry.model_config

    def pick(key: str, default: int) -> int:
        return _positive(yaml_, key) or _positive(from_properties, key) or default

    min_w, max_w = _positive(yaml_, "minWorkers"), _positive(yaml_, "maxWorkers")
    if not (min_w and max_w and max_w >= min_w):
        min_w = _positive(from_properties, "minWorkers") or default_workers
        max_w = _positive(from_properties, "maxWorkers") or max(min_w, default_workers)
    return TorchServeKnobs(pick("batchSize", 1), pick("maxBatchDelay", DEFAULT_BATCH_DELAY_MS), min_w,
                           max(max_w, min_w), pick("responseTimeout", timeout_s))  # fmt: skip


def _notes(entry: StoreEntry) -> list[str]:
    notes = sorted({why for key, why in _UNSUPPORTED.items() if entry.model_config.get(key)})
    device = str(entry.model_config.get("deviceType", "")).lower()
    if device and device not in ("cpu", "none"):
        notes.append(f"deviceType {device!r} is left out: handlers run on the CPU")
    if entry.model.get("requirementsFile"):
        notes.append("requirementsFile is not installed: install the handler's packages into servelab's environment")
    return notes


def plan_model(
    name: str,
    entries: list[StoreEntry],
    *,
    properties_models: dict[str, dict[str, Any]] | None = None,
    default_workers: int = 1,
    max_workers: int = 8,
    response_timeout_s: int = 120,
    envelope: str | None = None,
) -> ModelPlan:
    """The servelab model ``name`` made of its archives (one per TorchServe version)."""
    by_version: dict[str, StoreEntry] = {}
    for entry in entries:
        if entry.version in by_version:
            raise InvalidArgument(
                f"model {name!r}: {by_version[entry.version].file} and {entry.file} are both version {entry.version}"
            )
        by_version[entry.version] = entry
    ordered = sorted(by_version, key=version_key)
    numbers = {v: i + 1 for i, v in enumerate(ordered)}
    per_version = properties_models or {}
    default = next((v for v in ordered if per_version.get(v, {}).get("defaultVersion") is True), ordered[0])
    knobs = _knobs(by_version[default], per_version.get(default, {}), default_workers, response_timeout_s)
    notes = _notes(by_version[default])
    if knobs.min_workers > max_workers:
        notes.append(f"minWorkers {knobs.min_workers} is capped at {max_workers} worker processes (workers.max_workers_per_model)")
    if knobs.max_workers > knobs.min_workers:
        notes.append(f"servelab runs minWorkers ({knobs.min_workers}) workers and does not scale up to maxWorkers "
                     f"({knobs.max_workers}); scale with the management API")
    others = [v for v in ordered if v != default and _knobs(by_version[v], per_version.get(v, {}), default_workers,
                                                          response_timeout_s) != knobs]  # fmt: skip
    if others:
        notes.append(f"versions {others} have other batching/worker settings; servelab serves every version with "
                     f"version {default}'s (one config per model)")
    config = _config(name, knobs, min(knobs.min_workers, max_workers), numbers, default, by_version, envelope)
    return ModelPlan(name, config, {numbers[v]: by_version[v] for v in ordered}, knobs, notes)


def _config(
    name: str, knobs: TorchServeKnobs, workers: int, numbers: dict[str, int], default: str,
    by_version: dict[str, StoreEntry], envelope: str | None = None,
) -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, backend=BACKEND, max_batch_size=max(1, knobs.batch_size))
    config.input.add(name=BODY, data_type=mc.TYPE_STRING, dims=[-1])
    config.input.add(name=REQUEST, data_type=mc.TYPE_STRING, dims=[1], optional=True)
    config.output.add(name=RESPONSE, data_type=mc.TYPE_STRING, dims=[-1])
    config.output.add(name=RESPONSE_META, data_type=mc.TYPE_STRING, dims=[1])
    if knobs.batch_size > 1:
        config.dynamic_batching.max_queue_delay_microseconds = knobs.max_batch_delay_ms * 1000
    config.instance_group.add(count=workers, kind=mc.ModelInstanceGroup.KIND_CPU)
    config.version_policy.all.SetInParent()
    TorchServeHandlerParameters(
        torchserve_versions=numbers, torchserve_default_version=default,
        torchserve_urls={v: e.file for v, e in by_version.items()},
        torchserve_max_workers=knobs.max_workers, torchserve_response_timeout_s=knobs.response_timeout_s,
        torchserve_envelope=envelope, torchserve_max_batch_delay_ms=knobs.max_batch_delay_ms,
    ).write(config)  # fmt: skip
    SchedulerParameters(instance_mode="process").write(config)
    return config
