"""The worker program (``python -m servelab.core.workers FD PARENT_PID ARENA_BYTES``): one instance.

It is a program of its own, never a re-run of the server's ``__main__``: it reads what to load
from the channel (backend import path, the BackendContext fields, the server's ``sys.path``),
builds and loads the backend once, then answers EXECUTE messages until STOP or until the server
goes away. Inputs are numpy views into the server's shared memory, valid while the request runs.
``ctx.infer`` calls other models through the server (a CALL message; the answer comes back while
the request is still running), which is what Triton's BLS calls will use.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from servelab.backends.base import Backend, BackendContext, Executed, Inputs, Outputs
from servelab.core.workers._arena import ArenaWriter
from servelab.core.workers._channel import (
    CALL,
    CALL_RESULT,
    EXECUTE,
    FAILED,
    LOAD,
    READY,
    RESULT,
    STOP,
    Channel,
    Put,
    error_entry,
    error_from,
)
from servelab.errors import InternalError, ServelabError
from servelab.protocol import model_config_pb2 as mc

__all__ = ["main"]

log = logging.getLogger("servelab.worker")

_PARENT_POLL_S = 1.0


class _Pump:
    """Lets any thread of the worker wait for a message: one reads the socket, the others wait.

    The main thread waits for the next request; a thread inside the model waits for the answer to
    its call. Whoever reads files what it got (requests in the inbox, answers by call id).
    """

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self._cond = threading.Condition(threading.Lock())
        self._reading = False
        self._gone = False
        self._inbox: deque[tuple[int, int, Any]] = deque()
        self._answers: dict[int, Any] = {}

    def next_request(self) -> tuple[int, int, Any]:
        return self._wait(lambda: self._inbox.popleft() if self._inbox else None)

    def answer(self, call_id: int) -> Any:
        return self._wait(lambda: self._answers.pop(call_id, None))

    def _wait(self, take: Callable[[], Any]) -> Any:
        with self._cond:
            while True:
                got = take()
                if got is not None:
                    return got
                if self._gone:
                    raise EOFError("the server closed the channel")
                if self._reading:
                    self._cond.wait()
                    continue
                self._reading = True
                self._cond.release()
                try:
                    message = self._read()
                finally:
                    self._cond.acquire()
                    self._reading = False
                    self._cond.notify_all()
                self._file(message)

    def _read(self) -> tuple[int, int, Any] | None:
        """One message with its tensors materialised (views for requests, copies for answers)."""
        try:
            kind, msg_id, body = self.channel.recv()
        except (EOFError, OSError):
            return None
        if kind == EXECUTE:
            body = [self.channel.arrays(descriptors, copy=False) for descriptors in body]
        elif kind == CALL_RESULT and body[0] == 0:
            body = (0, self.channel.arrays(body[1], copy=True))
        return kind, msg_id, body

    def _file(self, message: tuple[int, int, Any] | None) -> None:
        if message is None:
            self._gone = True
        elif message[0] == CALL_RESULT:
            self._answers[message[1]] = message[2]
        else:
            self._inbox.append(message)


class _Worker:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.pump = _Pump(channel)
        self.backend: Backend | None = None
        self._calls = itertools.count(1)
        self._current = 0  # request being executed: owner of the blocks a call's answer uses

    # ----- calls into the server -----
    def call_server(self, model: str, version: str, inputs: Inputs) -> Outputs:
        """``ctx.infer`` in a worker: run another model through the server while this request runs."""
        call_id = next(self._calls)
        owner = self._current
        self.channel.send(CALL, call_id, build=lambda put: (owner, model, version, put(inputs)))
        answer = self.pump.answer(call_id)
        if answer[0] == 0:
            return answer[1]  # type: ignore[no-any-return]
        raise error_from(answer[1], answer[2])

    # ----- life -----
    def load(self, spec: dict[str, Any]) -> None:
        sys.path[:] = spec["sys_path"]
        module_name, _, attr = spec["backend"].partition(":")
        cls = importlib.import_module(module_name)
        for part in attr.split("."):
            cls = getattr(cls, part)
        config = mc.ModelConfig.FromString(spec["config"])
        ctx = BackendContext(
            spec["model"], spec["version"], Path(spec["version_dir"]), config, spec["threads"], self.call_server
        )
        backend: Backend = cls(ctx)  # type: ignore[operator]
        backend.load()
        self.backend = backend

    def serve(self) -> None:
        while True:
            try:
                kind, msg_id, body = self.pump.next_request()
            except EOFError:
                return
            if kind == STOP:
                return
            if kind == EXECUTE:
                self._execute(msg_id, body)

    def _execute(self, request_id: int, requests: list[Inputs]) -> None:
        assert self.backend is not None
        self._current = request_id
        try:
            executed = self.backend.execute_timed(requests)
        except BaseException as exc:  # execute_timed guards; this is the last line of defence
            executed = Executed([InternalError(f"worker failed: {exc!r}")] * len(requests))
        finally:
            self._current = 0

        def body(put: Put) -> tuple[list[Any], int, int, int]:
            t0 = time.perf_counter_ns()
            entries = [_entry(put, r) for r in executed.results]
            return entries, executed.input_ns, executed.infer_ns, executed.output_ns + time.perf_counter_ns() - t0

        try:
            self.channel.send(RESULT, request_id, build=body)
        except ServelabError as exc:  # e.g. too many outputs for one header: fail them, keep serving
            self.channel.send(RESULT, request_id, ([error_entry(exc)] * len(requests), 0, executed.infer_ns, 0))


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
    worker = _Worker(channel)
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
