"""The server's side of one worker process: a Backend proxy that queues, dispatches and supervises.

:class:`WorkerInstance` runs one model instance in ``python -m servelab.core.workers``. Requests
queue in the instance (the time counts as queue time) and go to the worker one execution at a
time; the worker's answer comes back on a reader thread, which also

* serves the worker's calls into the server (``ctx.infer`` in the worker: Triton's BLS),
* answers a request still running at the request deadline with Unavailable, and kills the worker
  if it is still busy ``kill_timeout_s`` later,
* notices the worker dying: the running and queued requests fail with Unavailable naming the
  model and the exit status, the instance is not available, and the worker is restarted with
  exponential backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from servelab.backends.base import Backend, BackendContext, Executed, Inputs, Outputs
from servelab.config.settings import WorkerSettings
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
from servelab.errors import InternalError, ServelabError, Unavailable, Unsupported

__all__ = ["WorkerHost", "WorkerInstance"]

log = logging.getLogger("servelab.workers")

_TICK_S = 0.1  # how often the reader looks at deadlines while nothing arrives
_STABLE_S = 60.0  # a worker that lived this long restarts with the initial backoff again
_SRC = str(Path(__file__).resolve().parents[3])  # the folder holding the servelab package


class WorkerHost(Protocol):
    """What an instance needs from its pool (:class:`~servelab.core.workers.pool.WorkerPool`)."""

    settings: WorkerSettings
    #: the request deadline the worker enforces
    timeout_s: float

    def calls(self) -> Executor: ...

    def forget(self, worker: WorkerInstance) -> None: ...


@dataclass(slots=True, eq=False)
class _Ticket:
    """One execution asked of the worker and how to hand back its :class:`Executed`."""

    id: int
    requests: list[Inputs]
    deliver: Callable[[Executed], None]
    enqueued_ns: int
    started_ns: int = 0
    sent_ns: int = 0
    input_ns: int = 0
    answered: bool = False
    cancelled: bool = False


def _exit_text(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by signal {-code} ({signal.Signals(-code).name})"
        return f"was killed by signal {-code}"
    return f"exited with status {code}"


class WorkerInstance(Backend):
    """A model instance living in its own worker process (see the module docstring)."""

    def __init__(self, ctx: BackendContext, backend: type[Backend], pool: WorkerHost) -> None:
        super().__init__(ctx)
        self.kind = backend.kind  # type: ignore[misc]
        self.target = f"{backend.__module__}:{backend.__qualname__}"
        self.pool = pool
        self.label = f"model '{ctx.model_name}' version {ctx.version}"
        self._lock = threading.Lock()
        self._up = threading.Condition(self._lock)
        self._queue: deque[_Ticket] = deque()
        self._active: _Ticket | None = None
        self._state = "STARTING"
        self._proc: subprocess.Popen[bytes] | None = None
        self._channel: Channel | None = None
        self._ids = itertools.count(1)
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._up_since = 0.0
        self._delay = 0.0  # the next restart's backoff
        self._killed_for = ""
        #: restarts so far, why the last worker went, and why the instance is down (for readiness)
        self.restarts = 0
        self.last_exit = ""
        self.down_reason = "starting"

    # ----- state seen by schedulers and readiness -----
    @property
    def available(self) -> bool:
        return self._state == "READY"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def queued(self) -> int:
        return len(self._queue)

    def wait_available(self, timeout_s: float) -> bool:
        with self._up:
            return self._up.wait_for(lambda: self._state in ("READY", "CLOSED"), timeout_s) and self.available

    def describe(self) -> dict[str, Any]:
        """The worker's state for statistics: pid, READY / RESTARTING / ..., restarts, last exit."""
        return {
            "pid": self.pid, "state": self._state, "restarts": self.restarts, "last_exit": self.last_exit,
            "busy": self._active is not None, "queued": len(self._queue),
        }

    # ----- life -----
    def start(self) -> None:
        """Start the worker process and send it what to load (load() waits for it)."""
        self._proc, self._channel = self._spawn()

    def load(self) -> None:
        if self._proc is None:
            self.start()
        assert self._proc is not None and self._channel is not None
        try:
            self._handshake(self._proc, self._channel)
        except BaseException:
            self.close(grace_s=0.0)
            raise
        self._ready(self._proc, self._channel)
        self._thread = threading.Thread(target=self._supervise, daemon=True, name=f"worker-{self.ctx.model_name}")
        self._thread.start()

    def _spawn(self) -> tuple[subprocess.Popen[bytes], Channel]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        options = self.pool.settings
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_SRC, env.get("PYTHONPATH", "")) if p)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "servelab.core.workers", str(theirs.fileno()), str(os.getpid()),
                 str(options.arena_bytes)],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        channel = Channel(ours, ArenaWriter(options.arena_bytes, f"s{proc.pid}"), release_acked=False)
        ctx = self.ctx
        spec = {
            "backend": self.target, "model": ctx.model_name, "version": ctx.version,
            "version_dir": str(ctx.version_dir), "config": ctx.config.SerializeToString(), "threads": ctx.threads,
            "sys_path": list(sys.path), "log_level": logging.getLogger().getEffectiveLevel(),
        }
        with contextlib.suppress(OSError):  # it died at once: the handshake reports how
            channel.send(LOAD, 0, spec)
        return proc, channel

    def _handshake(self, proc: subprocess.Popen[bytes], channel: Channel) -> None:
        timeout_s = self.pool.settings.start_timeout_s
        ready, _, _ = select.select([channel.sock], [], [], timeout_s)
        if not ready:
            raise Unavailable(f"{self.label}: its worker process did not load the model within {timeout_s:g} s")
        try:
            kind, _, body = channel.recv()
        except (EOFError, OSError):
            code = _wait(proc, 5.0)
            raise Unavailable(f"{self.label}: its worker process {_exit_text(code)} while loading") from None
        if kind == FAILED:
            error = error_from(body[0], body[1])
            raise type(error)(f"{self.label} failed to load in its worker process: {error.message}")
        if kind != READY:
            raise InternalError(f"{self.label}: worker process sent message {kind} instead of READY")

    def _ready(self, proc: subprocess.Popen[bytes], channel: Channel) -> None:
        with self._up:
            self._proc, self._channel, self._state = proc, channel, "READY"
            self.down_reason = ""
            self._up.notify_all()
        self._up_since = time.monotonic()
        log.info("%s: worker process %d ready", self.label, proc.pid)

    def unload(self) -> None:
        self.close()

    def close(self, grace_s: float = 5.0) -> None:
        """Fail what is queued, let the running request finish for up to ``grace_s``, then stop."""
        self._closing.set()
        with self._up:
            self._state = "CLOSED"
            self.down_reason = "unloaded"
            queued = self._drain_queue()
            proc, channel = self._proc, self._channel
            self._up.notify_all()
        self._fail(queued, Unavailable(f"{self.label} was unloaded before the request ran"))
        if proc is not None and channel is not None:
            self._stop_process(proc, channel, grace_s)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        active = self._active
        if active is not None:
            self._fail([active], Unavailable(f"{self.label} was unloaded while the request ran"))
        self.pool.forget(self)

    def kill(self) -> None:
        """Stop at once (the server's exit deadline has come)."""
        self.close(grace_s=0.0)

    def _stop_process(self, proc: subprocess.Popen[bytes], channel: Channel, grace_s: float) -> None:
        with contextlib.suppress(OSError):
            channel.send(STOP, 0)
        if _wait(proc, grace_s) is None:
            proc.kill()
            _wait(proc, 5.0)
        channel.close()

    # ----- requests -----
    def submit(self, requests: list[Inputs], deliver: Callable[[Executed], None]) -> _Ticket:
        """Queue one execution; ``deliver`` gets its Executed exactly once, from some thread."""
        ticket = _Ticket(next(self._ids), requests, deliver, time.perf_counter_ns())
        claimed = None
        with self._lock:
            refused = None if self._state == "READY" else self._refusal()
            if refused is None:
                self._queue.append(ticket)
                claimed = self._claim()
        if refused is not None:
            self._fail([ticket], refused)
        elif claimed is not None:
            self._send(*claimed)
        return ticket

    def execute_timed(self, requests: list[Inputs]) -> Executed:
        latch = threading.Lock()
        latch.acquire()
        box: list[Executed] = []

        def deliver(executed: Executed) -> None:
            box.append(executed)
            latch.release()

        self.submit(requests, deliver)
        latch.acquire()
        return box[0]

    async def execute_async(self, requests: list[Inputs]) -> Executed:
        """Like execute_timed without a thread: the reader thread resolves a future on this loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Executed] = loop.create_future()

        def deliver(executed: Executed) -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(_settle, future, executed)

        ticket = self.submit(requests, deliver)
        try:
            return await future
        except asyncio.CancelledError:
            ticket.cancelled = True  # a queued one is skipped; a running one's answer is dropped
            raise

    def execute(self, requests: list[Inputs]) -> list[Outputs | ServelabError]:
        return self.execute_timed(requests).results

    def infer(self, inputs: Inputs) -> Outputs:
        result = self.execute([inputs])[0]
        if isinstance(result, ServelabError):
            raise result
        return result

    def _refusal(self) -> Unavailable:
        if self._state == "CLOSED":
            return Unavailable(f"{self.label} is unloading")
        return Unavailable(f"{self.label} is not ready: {self.down_reason}")

    def _claim(self) -> tuple[_Ticket, Channel] | None:
        """Under the lock: the next live queued ticket becomes the running one, if the worker is free."""
        if self._active is not None or self._state != "READY" or self._channel is None:
            return None
        while self._queue:
            ticket = self._queue.popleft()
            if not (ticket.cancelled or ticket.answered):
                ticket.started_ns = time.perf_counter_ns()
                self._active = ticket
                return ticket, self._channel
        return None

    def _send(self, ticket: _Ticket, channel: Channel) -> None:
        def body(put: Put) -> list[Any]:
            descriptors = [put(r) for r in ticket.requests]
            ticket.sent_ns = time.perf_counter_ns()
            ticket.input_ns = ticket.sent_ns - ticket.started_ns
            return descriptors

        try:
            channel.send(EXECUTE, ticket.id, build=body, owner=ticket.id)
        except OSError:
            return  # the worker is gone: the reader fails the running ticket when it sees the end
        except Exception as exc:  # e.g. a tensor that cannot cross: fail it, run the next one
            channel.release(ticket.id)
            with self._lock:
                self._active = None
                claimed = self._claim()
            self._fail([ticket], exc if isinstance(exc, ServelabError) else InternalError(str(exc)))
            if claimed is not None:
                self._send(*claimed)

    def _answer(self, ticket: _Ticket, executed: Executed) -> None:
        with self._lock:
            if ticket.answered:
                return
            ticket.answered = True
        ticket.deliver(executed)

    def _fail(self, tickets: list[_Ticket], error: ServelabError) -> None:
        for t in tickets:
            self._answer(t, Executed([error] * len(t.requests)))

    def _drain_queue(self) -> list[_Ticket]:
        out = [t for t in self._queue if not t.answered]
        self._queue.clear()
        return out

    # ----- the reader / supervisor thread -----
    def _supervise(self) -> None:
        while True:
            proc, channel = self._proc, self._channel
            assert proc is not None and channel is not None
            self._read(channel)
            code = _wait(proc, 5.0)
            if code is None:  # the channel broke but the process lives on: it cannot be trusted
                proc.kill()
                code = _wait(proc, 5.0)
            channel.close()
            if self._closing.is_set():
                return
            self._died(proc.pid, code)
            if not self._restart():
                return

    def _read(self, channel: Channel) -> None:
        poller = select.poll()
        poller.register(channel.sock, select.POLLIN)
        while True:
            if poller.poll(self._wait_ms()):
                try:
                    kind, msg_id, body = channel.recv()
                except (EOFError, OSError):
                    return
                if kind == RESULT:
                    self._result(channel, msg_id, body)
                elif kind == CALL:
                    self._call(channel, msg_id, body)
                else:
                    log.error("%s: unexpected worker message %d; restarting the worker", self.label, kind)
                    return
            self._check_deadlines()

    def _result(self, channel: Channel, msg_id: int, body: Any) -> None:
        received_ns = time.perf_counter_ns()
        entries, child_input_ns, _, child_output_ns = body
        results: list[Outputs | ServelabError] = [
            channel.arrays(e[1], copy=True) if e[0] == 0 else error_from(e[1], e[2]) for e in entries
        ]
        channel.done_reading()
        channel.release(msg_id)
        copy_ns = time.perf_counter_ns() - received_ns
        with self._lock:
            ticket = self._active
            if ticket is None or ticket.id != msg_id:
                return
            self._active = None
            claimed = self._claim()
        if claimed is not None:
            self._send(*claimed)  # keep the worker busy before handing this answer back
        round_trip = received_ns - ticket.sent_ns
        self._answer(ticket, Executed(
            results,
            input_ns=ticket.input_ns + child_input_ns,
            infer_ns=max(0, round_trip - child_input_ns - child_output_ns),
            output_ns=child_output_ns + copy_ns,
            queue_ns=ticket.started_ns - ticket.enqueued_ns,
        ))

    def _call(self, channel: Channel, call_id: int, body: Any) -> None:
        owner, model, version, descriptors = body
        inputs = channel.arrays(descriptors, copy=True)
        self.pool.calls().submit(self._answer_call, channel, call_id, owner, model, version, inputs)

    def _answer_call(self, channel: Channel, call_id: int, owner: int, model: str, version: str,
                     inputs: Inputs) -> None:
        """Run a worker's call through the server's data plane and send the answer back."""
        try:
            if self.ctx.infer is None:
                raise Unsupported(f"{self.label}: this server takes no calls to other models from workers")
            outputs = self.ctx.infer(model, version, inputs)
            channel.send(CALL_RESULT, call_id, build=lambda put: (0, put(outputs)), owner=owner)
        except OSError:
            return  # the worker went away meanwhile
        except Exception as exc:
            with contextlib.suppress(OSError):
                channel.send(CALL_RESULT, call_id, error_entry(exc))

    # ----- deadlines -----
    def _wait_ms(self) -> int:
        settings, timeout_ns = self.pool.settings, int(self.pool.timeout_s * 1e9)
        now = time.perf_counter_ns()
        due = now + int(_TICK_S * 1e9)
        t = self._active
        if t is not None and t.started_ns:
            due = min(due, t.started_ns + timeout_ns + (int(settings.kill_timeout_s * 1e9) if t.answered else 0))
        return max(0, (due - now) // 1_000_000 + 1)

    def _check_deadlines(self) -> None:
        timeout_s, kill_s = self.pool.timeout_s, self.pool.settings.kill_timeout_s
        now = time.perf_counter_ns()
        late: list[_Ticket] = []
        kill = None
        with self._lock:
            t = self._active
            if t is not None and t.started_ns:
                busy_s = (now - t.started_ns) / 1e9
                if busy_s >= timeout_s and not t.answered:
                    late.append(t)
                if busy_s >= timeout_s + kill_s and not self._killed_for and self._proc is not None:
                    kill, self._killed_for = self._proc, f"after {busy_s:.1f} s on one request"
            waited = [q for q in self._queue if not q.answered and (now - q.enqueued_ns) / 1e9 >= timeout_s]
        if late:
            pid = self.pid
            self._fail(late, Unavailable(
                f"{self.label} did not answer within {timeout_s:g} s: its worker process (pid {pid}) is still "
                f"busy with the request and is replaced if it does not finish within {kill_s:g} s"
            ))
        if waited:
            self._fail(waited, Unavailable(f"{self.label}: the request waited {timeout_s:g} s for a busy worker"))
        if kill is not None:
            log.error("%s: worker process %d is stuck (%s): killing it", self.label, kill.pid, self._killed_for)
            kill.kill()

    # ----- death and restart -----
    def _died(self, pid: int, code: int | None) -> None:
        how = _exit_text(code)
        if self._killed_for:
            how = f"was stuck {self._killed_for} and killed"
        self.last_exit = how
        self._killed_for = ""
        with self._lock:
            self._state = "RESTARTING"
            self.down_reason = f"its worker process (pid {pid}) {how}; restarting it"
            active, self._active = self._active, None
            queued = self._drain_queue()
        log.error("%s: worker process %d %s; restarting it", self.label, pid, how)
        if active is not None:
            self._fail([active], Unavailable(f"{self.label}: its worker process (pid {pid}) {how} while running the request"))
        self._fail(queued, Unavailable(f"{self.label}: its worker process (pid {pid}) {how} before the request ran"))

    def _restart(self) -> bool:
        """Start a new worker, waiting longer after each failure; False when the instance closes first."""
        settings = self.pool.settings
        stable = time.monotonic() - self._up_since >= _STABLE_S
        delay = settings.restart_backoff_s if stable or not self.restarts else self._delay
        while True:
            self._delay = min(settings.restart_backoff_max_s, delay * 2)
            if self._closing.wait(delay):
                return False
            try:
                proc, channel = self._spawn()
                try:
                    self._handshake(proc, channel)
                except BaseException:
                    self._stop_process(proc, channel, 0)
                    raise
            except Exception as exc:
                message = exc.message if isinstance(exc, ServelabError) else repr(exc)
                log.error("%s: restarting its worker failed (%s); next try in %.1f s", self.label, message, self._delay)
                self.down_reason = f"restarting its worker failed: {message}"
                delay = self._delay
                continue
            if self._closing.is_set():
                self._stop_process(proc, channel, 0)
                return False
            self.restarts += 1
            self._ready(proc, channel)
            with self._lock:
                claimed = self._claim()
            if claimed is not None:
                self._send(*claimed)
            return True


def _wait(proc: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None


def _settle(future: asyncio.Future[Executed], executed: Executed) -> None:
    if not future.done():
        future.set_result(executed)
