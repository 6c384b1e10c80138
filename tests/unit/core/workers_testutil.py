"""Backends the worker-process tests run in real workers (a worker imports them by name: this folder
is on the server's sys.path, which the worker inherits)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

import numpy as np

from servelab.backends.base import Backend, BackendContext, Inputs, Outputs
from servelab.config.settings import WorkerSettings
from servelab.core.workers import WorkerInstance, WorkerPool
from servelab.core.workers._arena import ArenaWriter
from servelab.core.workers._channel import Channel
from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc


class _InWorker(Backend):
    """A backend that holds the GIL (so it runs in a worker process by default) and has nothing to load."""

    releases_gil: ClassVar[bool] = False

    def load(self) -> None:
        pass


class EchoBackend(_InWorker):
    """Returns every input as the output of the same name."""

    kind: ClassVar[str] = "echo"

    def infer(self, inputs: Inputs) -> Outputs:
        if "BAD" in inputs:
            raise InvalidArgument("input BAD is refused")
        return {name: np.array(a, copy=True) for name, a in inputs.items()}


class SleepBackend(_InWorker):
    """Sleeps ``x[0]`` seconds, then answers y = x and its pid: a slow or (for 1e6 s) hung model."""

    kind: ClassVar[str] = "sleep"

    def infer(self, inputs: Inputs) -> Outputs:
        x = inputs["x"]
        time.sleep(float(x.reshape(-1)[0]))
        return {"y": x.copy(), "pid": np.array([os.getpid()], np.int64)}


class CallingBackend(_InWorker):
    """Asks the server (``ctx.infer``) to run model ``inner`` on its input, as a BLS model would."""

    kind: ClassVar[str] = "calling"

    def load(self) -> None:
        assert self.ctx.infer is not None, "a worker's context has the server's infer"

    def infer(self, inputs: Inputs) -> Outputs:
        assert self.ctx.infer is not None
        inner = self.ctx.infer("inner", "", {"x": inputs["x"]})
        return {"y": inner["y"] + 1, "pid": np.array([os.getpid()], np.int64), "inner_pid": inner["pid"]}


def config(name: str = "m", max_batch_size: int = 0) -> mc.ModelConfig:
    return mc.ModelConfig(name=name, max_batch_size=max_batch_size)


def start_worker(
    cls: type[Backend],
    *,
    cfg: mc.ModelConfig | None = None,
    timeout_s: float = 60.0,
    infer: object = None,
    version_dir: Path = Path("."),
    context: dict[str, object] | None = None,
    **settings: float,
) -> WorkerInstance:
    """One loaded worker instance of ``cls`` (close it when done); ``context``: more BackendContext fields."""
    cfg = cfg or config()
    pool = WorkerPool(WorkerSettings(**settings), timeout_s)  # type: ignore[arg-type]
    ctx = BackendContext(cfg.name, 1, version_dir, cfg, 1, infer, **(context or {}))  # type: ignore[arg-type]
    worker = pool.instance(ctx, cls)
    worker.load()
    return worker


@contextmanager
def channel_pair(arena_bytes: int = 1 << 20) -> Iterator[tuple[Channel, Channel]]:
    """(server's end, worker's end) of one socket pair with their arenas, in this process."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server = Channel(a, ArenaWriter(arena_bytes, "test-s"), release_acked=False)
    worker = Channel(b, ArenaWriter(arena_bytes, "test-w"), release_acked=True)
    try:
        yield server, worker
    finally:
        server.close()
        worker.close()


#: SleepBackend sleeps "forever" on this
HUNG = {"x": np.array([1e6], np.float32)}


def wait_for(predicate: object, timeout_s: float = 60.0) -> None:
    """Poll ``predicate`` until it holds (a poll interval, not synchronisation)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)
