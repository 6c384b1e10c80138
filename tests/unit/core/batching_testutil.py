"""Backends and configs the scheduling tests share (imported by name: the test folder is on sys.path).

:class:`DoublingBackend` answers y = 2x and records each call's batch, so tests see what was merged;
given a :class:`harness.gates.ThreadGate`, a call whose rows start with :data:`HOLD` waits at the gate,
so a test holds an instance busy for exactly as long as it needs (never for a guessed time).
"""

from __future__ import annotations

import os
import threading
from typing import ClassVar

import numpy as np

from harness.backends import context
from harness.data import rows
from harness.gates import ThreadGate
from servelab.backends.base import Backend, BackendContext, Inputs, Outputs
from servelab.core.stats import ModelStats
from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc

__all__ = [
    "FEATURES", "HOLD", "DoublingBackend", "GilBackend", "LoadFailingBackend", "config", "context", "doubling",
    "rows", "stats",
]  # fmt: skip

FEATURES = 4
#: first value of a request that a gated DoublingBackend holds at its gate
HOLD = 1.0


def config(
    max_batch_size: int = 8,
    *,
    delay_us: int | None = None,
    preferred: tuple[int, ...] = (),
    preserve_ordering: bool = False,
    priority_levels: int = 0,
    default_priority: int = 0,
    timeout_us: int = 0,
    allow_override: bool = False,
    delay_action: bool = False,
    max_queue_size: int = 0,
    cache: bool = False,
    params: dict[str, str] | None = None,
) -> mc.ModelConfig:
    """A config for model 'm' with input x and output y, both FP32 [FEATURES]."""
    cfg = mc.ModelConfig(name="m", max_batch_size=max_batch_size)
    cfg.input.add(name="x", data_type=mc.TYPE_FP32, dims=[FEATURES])
    cfg.output.add(name="y", data_type=mc.TYPE_FP32, dims=[FEATURES])
    if delay_us is not None:
        db = cfg.dynamic_batching
        db.max_queue_delay_microseconds = delay_us
        db.preferred_batch_size.extend(preferred)
        db.preserve_ordering = preserve_ordering
        db.priority_levels = priority_levels
        db.default_priority_level = default_priority
        qp = db.default_queue_policy
        qp.default_timeout_microseconds = timeout_us
        qp.allow_timeout_override = allow_override
        qp.max_queue_size = max_queue_size
        qp.timeout_action = mc.ModelQueuePolicy.DELAY if delay_action else mc.ModelQueuePolicy.REJECT
    cfg.response_cache.enable = cache
    for key, value in (params or {}).items():
        cfg.parameters[key].string_value = value
    return cfg


class DoublingBackend(Backend):
    """y = 2x; a row holding NaN fails the whole call; with a gate, calls starting with HOLD wait there."""

    kind: ClassVar[str] = "doubling"

    def __init__(self, ctx: BackendContext, gate: ThreadGate | None = None) -> None:
        super().__init__(ctx)
        self.gate = gate
        self.batches: list[int] = []
        self.calls = 0
        self._lock = threading.Lock()

    def load(self) -> None:
        pass

    def infer(self, inputs: Inputs) -> Outputs:
        x = inputs["x"]
        with self._lock:
            self.calls += 1
            self.batches.append(len(x))
        held = self.gate is not None and x[0, 0] == HOLD
        if held:
            self.gate.hold()  # type: ignore[union-attr]
        if np.isnan(x).any():
            raise InvalidArgument("NaN in input x")
        y = x * 2.0
        if self.gate is not None and not held:
            self.gate.passing()
        return {"y": y}


class GilBackend(Backend):
    """A runtime that holds the GIL: answers y = 2x plus the process id that computed it."""

    kind: ClassVar[str] = "gil"
    releases_gil: ClassVar[bool] = False

    def load(self) -> None:
        self.pid = os.getpid()

    def infer(self, inputs: Inputs) -> Outputs:
        x = inputs["x"]
        return {"y": x * 2.0, "pid": np.full((len(x), 1), os.getpid(), dtype=np.int64)}


class LoadFailingBackend(GilBackend):
    """Fails to load (in its worker process)."""

    def load(self) -> None:
        raise RuntimeError("cannot open the model file")


def doubling(cfg: mc.ModelConfig, n: int = 1, gate: ThreadGate | None = None) -> list[DoublingBackend]:
    """``n`` instances of model 'm' sharing ``gate``."""
    return [DoublingBackend(context(cfg), gate) for _ in range(n)]


def stats() -> ModelStats:
    return ModelStats("m", 1)
