"""The worker program (``python -m servelab.core.workers FD PARENT_PID ARENA_BYTES``): one instance.

It is a program of its own, never a re-run of the server's ``__main__``: it reads what to load
from the channel (backend import path, the BackendContext fields, the server's ``sys.path``),
builds and loads the backend once, then answers EXECUTE messages until STOP or until the server
goes away. Inputs are numpy views into the server's shared memory, valid while the request runs.
``ctx.infer`` / ``ctx.infer_stream`` call other models through the server and ``ctx.custom_metrics``
keeps a model's metrics there (:mod:`._calls`). A decoupled request (STREAM) runs the backend's
``execute_stream``: each response leaves as a RESPONSE message when the model sends it, also after
``execute`` has returned and the worker has moved on to the next request.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from servelab.backends.base import (
    Backend,
    BackendContext,
    Executed,
    Inputs,
    Outputs,
    StreamItem,
    StreamRequest,
)
from servelab.core.workers._arena import ArenaWriter
from servelab.core.workers._calls import ServerCalls
from servelab.core.workers._channel import (
    EXECUTE,
    FAILED,
    LOAD,
    READY,
    RESPONSE,
    RESULT,
    STOP,
    STREAM,
    Channel,
    Put,
    error_entry,
)
from servelab.core.workers._pump import Pump
from servelab.core.workers._serving import item_body
from servelab.errors import InternalError, ServelabError, Unsupported
from servelab.protocol import model_config_pb2 as mc

__all__ = ["main"]

log = logging.getLogger("servelab.worker")

_PARENT_POLL_S = 1.0


class _Worker:
    def __init__(self, channel: Channel, spin_us: int = 0) -> None:
        self.channel = channel
        self.pump = Pump(channel, spin_us)
        self.calls = ServerCalls(channel, self.pump)
        self.backend: Backend | None = None

    # ----- life -----
    def load(self, spec: dict[str, Any]) -> None:
        sys.path[:] = spec["sys_path"]
        module_name, _, attr = spec["backend"].partition(":")
        cls = importlib.import_module(module_name)
        for part in attr.split("."):
            cls = getattr(cls, part)
        config = mc.ModelConfig.FromString(spec["config"])
        ctx = BackendContext(
            spec["model"], spec["version"], Path(spec["version_dir"]), config, spec["threads"], self.calls.infer,
            infer_stream=self.calls.stream, custom_metrics=self.calls.metrics,
        )
        backend: Backend = cls(ctx)  # type: ignore[operator]
        backend.load()
        self.backend = backend

    def serve(self) -> None:
        linger = False
        while True:
            try:
                kind, msg_id, body = self.pump.next_request(linger)
            except EOFError:
                return
            if kind == STOP:
                return
            linger = False
            if kind == EXECUTE:
                linger, requests = body
                self._execute(msg_id, requests)
            elif kind == STREAM:
                self._stream(msg_id, body)

    def _execute(self, request_id: int, requests: list[Inputs]) -> None:
        assert self.backend is not None
        try:
            executed = self.backend.execute_timed(requests)
        except BaseException as exc:  # execute_timed guards; this is the last line of defence
            executed = Executed([InternalError(f"worker failed: {exc!r}")] * len(requests))
        self._send_result(request_id, executed, len(requests))

    def _stream(self, request_id: int, body: list[tuple[Inputs, dict[str, Any], list[str], str]]) -> None:
        """A decoupled request: responses leave as the model sends them; RESULT when execute returns."""
        cancelled = self.pump.cancelled
        requests = [StreamRequest(i, p, o, lambda: request_id in cancelled, rid) for i, p, o, rid in body]

        def emit(index: int, item: StreamItem) -> None:
            try:
                self.channel.send(RESPONSE, request_id, build=lambda put: (index, *item_body(put, item)))
            except ServelabError as exc:  # e.g. too many outputs for one header: that response fails
                self.channel.send(RESPONSE, request_id, (index, error_entry(exc), item.final, {}))
            except OSError:
                return  # the server has gone
            if item.final:
                cancelled.discard(request_id)

        run = getattr(self.backend, "execute_stream", None)
        try:
            if run is None:
                raise Unsupported(f"backend {type(self.backend).__name__} cannot answer decoupled requests")
            executed: Executed = run(requests, emit)
        except BaseException as exc:  # the backend guards its model; this is the last line of defence
            for index in range(len(requests)):
                emit(index, StreamItem(error=InternalError(f"worker failed: {exc!r}"), final=True))
            executed = Executed([])
        self._send_result(request_id, executed, 0)

    def _send_result(self, request_id: int, executed: Executed, count: int) -> None:
        def body(put: Put) -> tuple[list[Any], int, int, int]:
            t0 = time.perf_counter_ns()
            entries = [_entry(put, r) for r in executed.results]
            return entries, executed.input_ns, executed.infer_ns, executed.output_ns + time.perf_counter_ns() - t0

        try:
            self.channel.send(RESULT, request_id, build=body)
        except ServelabError as exc:  # e.g. too many outputs for one header: fail them, keep serving
            self.channel.send(RESULT, request_id, ([error_entry(exc)] * count, 0, executed.infer_ns, 0))


def _entry(put: Put, result: Outputs | ServelabError) -> tuple[Any, ...]:
    if isinstance(result, ServelabError):
        return error_entry(result)
    try:
        if not all(isinstance(v, np.ndarray) for v in result.values()):
            result = {k: np.asarray(v) for k, v in result.items()}
        return 0, put(result)
    except Exception as exc:
        return error_entry(exc)


def _watch_parent(parent_pid: int) -> None:
    """Exit when the server is gone, even while the model is stuck (the socket alone cannot tell)."""
    while True:
        time.sleep(_PARENT_POLL_S)
        if os.getppid() != parent_pid:
            os._exit(3)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    fd, parent_pid, arena_bytes = int(args[0]), int(args[1]), int(args[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the server decides
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True, name="parent-watch").start()
    sock = socket.socket(fileno=fd)
    channel = Channel(sock, ArenaWriter(arena_bytes, f"w{os.getpid()}"), release_acked=True)
    kind, _, spec = channel.recv()
    if kind != LOAD:
        return 2
    logging.basicConfig(level=spec.get("log_level", logging.WARNING),
                        format="%(asctime)s %(levelname)s %(name)s[worker %(process)d]: %(message)s")
    worker = _Worker(channel, spec.get("spin_us", 0))
    try:
        worker.load(spec)
    except BaseException as exc:
        log.exception("model %s failed to load in worker process %d", spec.get("model"), os.getpid())
        channel.send(FAILED, 0, error_entry(exc)[1:])
        return 1
    channel.send(READY, 0, os.getpid())
    try:
        worker.serve()
    finally:
        if worker.backend is not None:
            try:
                worker.backend.unload()
            except Exception:
                log.exception("unloading model %s failed", spec["model"])
    return 0
