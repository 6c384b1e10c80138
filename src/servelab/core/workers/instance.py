"""The server's side of one worker process: a Backend proxy that supervises its worker.

:class:`WorkerInstance` runs one model instance in ``python -m servelab.core.workers``. Requests go
through its :class:`~servelab.core.workers._dispatch.Dispatcher` (queue, running request, reading the
channel). A supervisor thread per instance sleeps on the worker's pidfd and on the next deadline:

* at the request deadline the running request is answered Unavailable (its waiter leaves and the
  supervisor reads on until the late answer comes); ``kill_timeout_s`` later a worker still busy
  with it is killed;
* when the worker dies, the running and queued requests fail with Unavailable naming the model and
  the exit status (so do decoupled requests still streaming), the instance is unavailable, and the
  worker restarts with exponential backoff; its custom metrics go with it (a new one re-creates them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import subprocess
import threading
import time
import weakref
from concurrent.futures import Executor
from typing import Any, Protocol

from servelab.backends.base import Backend, BackendContext, Executed, Inputs, Outputs, StreamRequest
from servelab.config.settings import WorkerSettings
from servelab.core.workers._channel import Channel
from servelab.core.workers._dispatch import TICK_S, Dispatcher, Ticket
from servelab.core.workers._process import exit_text, handshake, spawn, stop, wait
from servelab.core.workers._serving import WorkerCalls
from servelab.core.workers._sinks import StreamSink
from servelab.errors import ServelabError, Unavailable

__all__ = ["WorkerHost", "WorkerInstance"]

log = logging.getLogger("servelab.workers")

_STABLE_S = 60.0  # a worker that lived this long restarts with the initial backoff again


class WorkerHost(Protocol):
    """What an instance needs from its pool (:class:`~servelab.core.workers.pool.WorkerPool`)."""

    settings: WorkerSettings
    #: the request deadline the worker enforces
    timeout_s: float

    def calls(self) -> Executor: ...

    def forget(self, worker: WorkerInstance) -> None: ...


class WorkerInstance(Backend):
    """A model instance living in its own worker process (see the module docstring)."""

    def __init__(self, ctx: BackendContext, backend: type[Backend], pool: WorkerHost) -> None:
        super().__init__(ctx)
        self.kind = backend.kind  # type: ignore[misc]
        self.target = f"{backend.__module__}:{backend.__qualname__}"
        self.pool = pool
        self.label = f"model '{ctx.model_name}' version {ctx.version}"
        self._metrics_owner = f"{ctx.model_name}/{ctx.version}/worker-{id(self):x}"
        metrics = ctx.custom_metrics.bind(self._metrics_owner) if ctx.custom_metrics is not None else None
        serving = WorkerCalls(self.label, ctx.infer, ctx.infer_stream, metrics, pool.calls)
        self._d = Dispatcher(self.label, serving, self._kill, self._wake, spin_us=pool.settings.spin_us)
        self._proc: subprocess.Popen[bytes] | None = None
        self._closing = threading.Event()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        weakref.finalize(self, _close_fds, self._wake_r, self._wake_w)  # once nobody can wake it any more
        self._thread: threading.Thread | None = None
        self._up_since = 0.0
        self._delay = 0.0  # the next restart's backoff
        self._killed_for = ""
        #: restarts so far, and how the last worker went
        self.restarts = 0
        self.last_exit = ""

    # ----- state seen by schedulers and readiness -----
    @property
    def available(self) -> bool:
        return self._d.state == "READY"

    @property
    def closed(self) -> bool:
        return self._d.state == "CLOSED"

    @property
    def down_reason(self) -> str:
        """Why the instance takes no request now (empty while available)."""
        return self._d.down_reason

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def deadline_s(self) -> float:
        """Every request is answered within this (the supervisor answers a late one, then kills its worker)."""
        return self.pool.timeout_s

    @property
    def queued(self) -> int:
        """Requests waiting: queued, or sent behind the running one (pipelined)."""
        return len(self._d.queue) + (self._d.pipelined is not None)

    @property
    def busy(self) -> int:
        """Requests on this worker: running, queued, and decoupled ones still streaming."""
        return self.queued + len(self._d.streams) + (self._d.active is not None)

    def wait_available(self, timeout_s: float) -> bool:
        d = self._d
        with d.up:
            return d.up.wait_for(lambda: d.state in ("READY", "CLOSED"), timeout_s) and self.available

    def describe(self) -> dict[str, Any]:
        """The worker's state for statistics: pid, READY / RESTARTING / ..., restarts, last exit."""
        return {
            "pid": self.pid, "state": self._d.state, "restarts": self.restarts, "last_exit": self.last_exit,
            "busy": self._d.active is not None, "queued": self.queued,
        }

    # ----- life -----
    def start(self) -> None:
        """Start the worker process and send it what to load (:meth:`load` waits for it)."""
        self._proc, self._d.channel = spawn(self.target, self.ctx, self.pool.settings.arena_bytes, self.pool.settings.worker_spin_us)

    def load(self) -> None:
        if self._proc is None:
            self.start()
        proc, channel = self._proc, self._d.channel
        assert proc is not None and channel is not None
        try:
            handshake(proc, channel, self.label, self.pool.settings.start_timeout_s, self._d.serving.handle)
        except BaseException:
            self.close(grace_s=0.0)
            raise
        self._ready(proc, channel)
        self._thread = threading.Thread(target=self._supervise, daemon=True, name=f"worker-{self.ctx.model_name}")
        self._thread.start()

    def _ready(self, proc: subprocess.Popen[bytes], channel: Channel) -> None:
        d = self._d
        with d.up:
            self._proc, d.channel, d.state, d.down_reason = proc, channel, "READY", ""
            d.up.notify_all()
        self._up_since = time.monotonic()
        log.info("%s: worker process %d ready", self.label, proc.pid)

    def unload(self) -> None:
        self.close()

    def close(self, grace_s: float = 5.0) -> None:
        """Fail what is queued and stop the worker: an idle one gets ``grace_s`` to unload its model
        (``finalize``); one still busy is killed at once (whoever unloads has drained already)."""
        d = self._d
        if self._closing.is_set() and d.state == "CLOSED":
            return
        self._closing.set()
        with d.up:
            d.state, d.down_reason = "CLOSED", "unloaded"
            queued = d.drain_queue()
            proc, channel = self._proc, d.channel
            if d.active is not None:
                grace_s = 0.0
            d.up.notify_all()
        d.fail(queued, Unavailable(f"{self.label} was unloaded before the request ran"))
        if proc is not None and channel is not None:
            stop(proc, channel, grace_s)
        d.streams.fail_all(Unavailable(f"{self.label} was unloaded while the request was streaming responses"))
        self._forget_metrics()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10.0)
        if self._thread is None and channel is not None:
            channel.close()
        self.pool.forget(self)

    def kill(self) -> None:
        """Stop at once (the server's exit deadline has come)."""
        self.close(grace_s=0.0)

    # ----- requests (the dispatcher's) -----
    def execute_timed(self, requests: list[Inputs]) -> Executed:
        return self._d.execute_timed(requests)

    async def execute_async(self, requests: list[Inputs]) -> Executed:
        """Like execute_timed without a thread: the calling event loop reads the worker's answer."""
        return await self._d.execute_async(requests)

    def execute(self, requests: list[Inputs]) -> list[Outputs | ServelabError]:
        return self._d.execute_timed(requests).results

    def open_stream(self, request: StreamRequest, sink: StreamSink) -> None:
        """Run a decoupled request: its responses go to ``sink`` as the worker sends them, the last final."""
        self._d.open_stream(request, sink)

    def infer(self, inputs: Inputs) -> Outputs:
        result = self.execute([inputs])[0]
        if isinstance(result, ServelabError):
            raise result
        return result

    # ----- the supervisor thread -----
    def _supervise(self) -> None:
        while True:
            proc, channel = self._proc, self._d.channel
            assert proc is not None and channel is not None
            self._watch(proc, channel)
            code = wait(proc, 5.0)
            self._d.retire(channel)
            if self._closing.is_set():
                self._closed_while_running()
                return
            self._died(proc.pid, code)
            if not self._restart():
                return

    def _watch(self, proc: subprocess.Popen[bytes], channel: Channel) -> None:
        """Until the worker process exits: deadlines, and reading when no waiter does."""
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        pidfd = _pidfd(proc.pid)
        if pidfd is not None:
            poller.register(pidfd, select.POLLIN)
        sock_fd = channel.sock.fileno()
        watching = False
        d = self._d
        try:
            while True:
                wanted = d.reader is None and (d.active is not None or bool(d.streams)) and d.eof is not channel
                if wanted != watching:
                    (poller.register(sock_fd, select.POLLIN) if wanted else poller.unregister(sock_fd))
                    watching = wanted
                due_ns = self._next_due_ns()
                for fd, _ in poller.poll(max(0, (due_ns - time.perf_counter_ns()) // 1_000_000 + 1)):
                    if fd == pidfd:
                        return
                    if fd == self._wake_r:
                        with contextlib.suppress(BlockingIOError):
                            os.read(self._wake_r, 4096)
                    elif fd == sock_fd and watching and not d.read_ready(channel):
                        d.eof = channel
                if pidfd is None and proc.poll() is not None:
                    return
                if d.eof is channel and wait(proc, 2.0) is None:
                    self._kill("its channel closed while it kept running")
                if time.perf_counter_ns() >= due_ns:
                    self._check_deadlines()
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"x")

    def _kill(self, why: str) -> None:
        proc = self._proc
        if proc is not None and not self._killed_for:
            self._killed_for = why
            log.error("%s: worker process %d %s: killing it", self.label, proc.pid, why)
            proc.kill()

    # ----- deadlines -----
    def _next_due_ns(self) -> int:
        """When deadlines need a look next: the running request's deadline (or kill deadline), or a tick."""
        now = time.perf_counter_ns()
        due = now + int(TICK_S * 1e9)
        t = self._d.active
        if t is not None and t.started_ns and not self._killed_for:
            limit_s = self.pool.timeout_s + (self.pool.settings.kill_timeout_s if t.answered else 0.0)
            due = min(due, t.started_ns + int(limit_s * 1e9))
        return due

    def _check_deadlines(self) -> None:
        timeout_s, kill_s = self.pool.timeout_s, self.pool.settings.kill_timeout_s
        now = time.perf_counter_ns()
        late: list[Ticket] = []
        stuck_s = 0.0
        d = self._d
        with d.lock:
            t = d.active
            if t is not None and t.started_ns:
                busy_s = (now - t.started_ns) / 1e9
                if busy_s >= timeout_s and not t.answered:
                    late.append(t)
                if busy_s >= timeout_s + kill_s:
                    stuck_s = busy_s
            waiting = [*d.queue, d.pipelined] if d.pipelined is not None else d.queue
            waited = [q for q in waiting if not q.answered and (now - q.enqueued_ns) / 1e9 >= timeout_s]
        if late:
            d.fail(late, Unavailable(
                f"{self.label} did not answer within {timeout_s:g} s: its worker process (pid {self.pid}) is "
                f"still busy with the request and is replaced if it does not finish within {kill_s:g} s"
            ))
        if waited:
            d.fail(waited, Unavailable(f"{self.label}: the request waited {timeout_s:g} s for a busy worker"))
        if stuck_s:
            self._kill(f"was stuck {stuck_s:.1f} s on one request")

    # ----- death and restart -----
    def _died(self, pid: int, code: int | None) -> None:
        how = f"{self._killed_for} and was killed" if self._killed_for else exit_text(code)
        self.last_exit, self._killed_for = how, ""
        d = self._d
        with d.lock:
            d.state = "RESTARTING"
            d.down_reason = f"its worker process (pid {pid}) {how}; restarting it"
            sent = d.in_worker()
            queued = sent[1:] + d.drain_queue()  # a pipelined one had not started
        log.error("%s: worker process %d %s; restarting it", self.label, pid, how)
        if sent:
            d.fail(sent[:1], Unavailable(f"{self.label}: its worker process (pid {pid}) {how} while running the request"))
        d.fail(queued, Unavailable(f"{self.label}: its worker process (pid {pid}) {how} before the request ran"))
        d.streams.fail_all(Unavailable(f"{self.label}: its worker process (pid {pid}) {how} while the request was streaming"))
        self._forget_metrics()

    def _closed_while_running(self) -> None:
        d = self._d
        with d.lock:
            sent = d.in_worker()
        d.fail(sent, Unavailable(f"{self.label} was unloaded while the request ran"))
        d.streams.fail_all(Unavailable(f"{self.label} was unloaded while the request was streaming responses"))

    def _forget_metrics(self) -> None:
        """The worker's custom metrics go with it (a restarted worker creates them again)."""
        if self.ctx.custom_metrics is not None:
            self.ctx.custom_metrics.forget(self._metrics_owner)

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
                proc, channel = spawn(self.target, self.ctx, settings.arena_bytes, settings.worker_spin_us)
                try:
                    handshake(proc, channel, self.label, settings.start_timeout_s, self._d.serving.handle)
                except BaseException:
                    stop(proc, channel, 0.0)
                    channel.close()
                    raise
            except Exception as exc:
                message = exc.message if isinstance(exc, ServelabError) else repr(exc)
                log.error("%s: restarting its worker failed (%s); next try in %.1f s", self.label, message, self._delay)
                self._d.down_reason = f"restarting its worker failed: {message}"
                delay = self._delay
                continue
            if self._closing.is_set():
                stop(proc, channel, 0.0)
                channel.close()
                return False
            self.restarts += 1
            self._d.eof = None
            self._ready(proc, channel)
            with self._d.lock:
                claimed = self._d.claim()
            if claimed is not None:
                self._d.start(claimed)
            return True


def _close_fds(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd (old kernel, or gone): the supervisor polls instead
        return None
