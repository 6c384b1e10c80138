"""Backends and configs the scheduling tests share (imported by name: the test folder is on sys.path).

:class:`TimedBackend` sleeps a known time per call and doubles its input, so timing-sensitive tests do
not depend on a runtime's speed; it records each call's batch so tests can see what was merged.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnx
from onnx import TensorProto, helper

from servelab.backends.base import Backend, BackendContext, Inputs, Outputs
from servelab.core.stats import ModelStats
from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc

FEATURES = 4


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


def context(cfg: mc.ModelConfig, version_dir: Path | None = None) -> BackendContext:
    return BackendContext("m", 1, version_dir or Path("."), cfg, threads=1)


class TimedBackend(Backend):
    """y = 2x after sleeping ``delay_s`` per call; a row holding NaN fails the whole call."""

    kind: ClassVar[str] = "timed"

    def __init__(self, ctx: BackendContext, delay_s: float = 0.0, sleep_from_input: bool = False) -> None:
        super().__init__(ctx)
        self.delay_s = delay_s
        #: sleep max(x[:, 0]) seconds instead (lets one request be slow and another fast)
        self.sleep_from_input = sleep_from_input
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
        if self.sleep_from_input:
            time.sleep(float(np.nanmax(x[:, 0])))
        elif self.delay_s:
            time.sleep(self.delay_s)
        if np.isnan(x).any():
            raise InvalidArgument("NaN in input x")
        return {"y": x * 2.0}


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


def timed(cfg: mc.ModelConfig, n: int = 1, delay_s: float = 0.0, sleep_from_input: bool = False) -> list[TimedBackend]:
    return [TimedBackend(context(cfg), delay_s, sleep_from_input) for _ in range(n)]


def stats() -> ModelStats:
    return ModelStats("m", 1)


def rows(n: int, value: float | None = None, seed: int = 0) -> np.ndarray:
    if value is not None:
        return np.full((n, FEATURES), value, dtype=np.float32)
    return np.random.default_rng(seed).standard_normal((n, FEATURES)).astype(np.float32)


def linear_onnx(path: Path, features_in: int = FEATURES, features_out: int = 3, seed: int = 0) -> np.ndarray:
    """An ONNX model y = x @ W (batch dim symbolic); returns W for reference answers."""
    w = np.random.default_rng(seed).standard_normal((features_in, features_out)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", features_in])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", features_out])
    init = helper.make_tensor("W", TensorProto.FLOAT, w.shape, w.reshape(-1).tolist())
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "linear", [x], [y], [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return w
