"""Tickets (one execution asked of a worker, and who waits for it) and how an event loop reads for them.

The loop whose request runs in the worker watches the worker's socket (``add_reader``) and reads the
answer itself; the watch stays while the next request's waiter is on the same loop. An event loop that
sends a request to an idle worker while nothing else waits on it polls the socket for the answer a short
while (``spin_us``, at most twice the worker's typical answer time) instead of sleeping in its selector:
on a virtual machine a wake-up costs ~15 us of the sender's CPU plus the sleeper's latency, twice per
request. Anything else the loop would do waits at most that long, and only while the loop looks idle:
requests that another frontend (grpc.aio) holds before they reach servelab are invisible to the count
of waiters, so :class:`LoopLoad` also reads how busy the loop's thread is (CPU over wall time, a 20 ms window,
its spinning left out): a loop that is nearly always working has requests queued somewhere, and the spin stays
off until it is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servelab.backends.base import Executed, Inputs
from servelab.core.workers._channel import Channel
from servelab.core.workers._latch import Latch
from servelab.core.workers._sinks import StreamSink

__all__ = ["AWAITING", "LINGER_ALLOWED", "LoopLoad", "LoopReading", "Ticket"]

#: a loop whose thread was busier than this (CPU over wall time, its spinning left out) has work queued
BUSY_SHARE = 0.85
#: how often that share is worked out
WINDOW_NS = 20_000_000
#: False in a request's context: its worker does not poll for the next request after it (``worker_spin_us``).
#: The gRPC front doors set it: grpc.aio hands every call from its own poller thread to the loop, and that
#: thread needs the CPU a polling worker would take (on 2 cores, gRPC c=1/4/16 lost 10%/20%/22% with it)
LINGER_ALLOWED: contextvars.ContextVar[bool] = contextvars.ContextVar("servelab_worker_linger", default=True)


@dataclass(slots=True, eq=False)
class LoopLoad:
    """What one event loop is doing, as far as spinning for a worker's answer is concerned."""

    awaiting: int = 0  # requests awaiting a worker's answer on it, over every worker
    spun_ns: int = 0  # total time this loop spent spinning
    busy: bool = False  # its thread's CPU share over the last window passed BUSY_SHARE
    window_wall: int = 0  # when the current window began (perf_counter_ns; 0: none yet)
    window_cpu: int = 0  # the loop thread's CPU time then
    window_spun: int = 0  # spun_ns then

    def idle(self) -> bool:
        return not self.busy

    def sample(self) -> None:
        """On the loop's thread: once a window, how busy the thread was, the time it spent spinning left out."""
        now = time.perf_counter_ns()
        wall = now - self.window_wall
        if wall < WINDOW_NS:
            return
        cpu = time.thread_time_ns()
        if self.window_wall:
            spun = self.spun_ns - self.window_spun
            self.busy = cpu - self.window_cpu - spun > BUSY_SHARE * (wall - spun)
        self.window_wall, self.window_cpu, self.window_spun = now, cpu, self.spun_ns


#: per event loop: its :class:`LoopLoad`
AWAITING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopLoad] = weakref.WeakKeyDictionary()


@dataclass(slots=True, eq=False)
class Ticket:
    """One execution asked of the worker, and who waits for it."""

    id: int
    requests: list[Inputs]
    enqueued_ns: int
    deliver: Callable[[Executed], None]
    loop: asyncio.AbstractEventLoop | None = None  # an async waiter reads on this loop
    woken: Latch | None = None  # a sync waiter: told to read, or that it is answered
    executed: Executed | None = None
    #: a decoupled request: its parameters and requested outputs travel too, its responses go here
    sink: StreamSink | None = None
    extras: tuple[dict[str, Any], list[str], str] | None = None
    claimed_ns: int = 0
    started_ns: int = 0  # 0 while it waits (queued, or pipelined behind the running one)
    sent_ns: int = 0
    input_ns: int = 0
    answered: bool = False
    cancelled: bool = False
    #: sent while its loop looked idle: the worker may poll for the next request after this one
    linger: bool = False


class LoopReading:
    """The event-loop side of a :class:`~._dispatch.Dispatcher`'s reading (its part of the class)."""

    channel: Channel | None
    eof: Channel | None
    reader: Ticket | None
    lock: Any
    spin_ns: int
    turnaround_ns: float
    _loop: asyncio.AbstractEventLoop | None
    _loop_channel: Channel | None
    _loop_fd: int
    _wake: Callable[[], None]

    def read_ready(self, channel: Channel) -> bool:
        raise NotImplementedError

    def _on_eof(self, channel: Channel) -> None:
        raise NotImplementedError

    def _spin(self, future: asyncio.Future[Executed], load: LoopLoad) -> None:
        """On the loop, alone: poll for the answer of a worker that answers fast (see the module docstring)."""
        budget = min(self.spin_ns, 2 * self.turnaround_ns)
        channel = self._loop_channel
        if budget <= 0 or self.turnaround_ns > self.spin_ns or channel is None or not load.idle():
            return
        start = time.perf_counter_ns()
        end = start + budget
        while not future.done() and self._loop_channel is channel and time.perf_counter_ns() < end:
            if channel.readable(0):
                self._on_readable()
        load.spun_ns += time.perf_counter_ns() - start

    def _hand_reading(self, ticket: Ticket) -> None:
        if ticket.sink is not None:
            self._wake()  # the supervisor reads a stream's messages
            return
        loop = ticket.loop
        if loop is None:
            if ticket.woken is not None:
                ticket.woken.set()
            return
        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:
            here = False
        if here:
            self._watch_on_loop(ticket)
            return
        try:
            loop.call_soon_threadsafe(self._watch_on_loop, ticket)
        except RuntimeError:  # that loop has closed: the supervisor reads
            with self.lock:
                if self.reader is ticket:
                    self.reader = None
            self._wake()

    def _watch_on_loop(self, ticket: Ticket) -> None:
        """In the ticket's loop: watch the socket (if it is still this ticket's turn)."""
        channel = self.channel
        if self.reader is not ticket or channel is None or self.eof is channel:
            return
        if self._loop_channel is channel and self._loop is ticket.loop:
            return  # already watching
        self._unwatch_loop()
        assert ticket.loop is not None
        self._loop, self._loop_channel, self._loop_fd = ticket.loop, channel, channel.sock.fileno()
        ticket.loop.add_reader(self._loop_fd, self._on_readable)

    def _on_readable(self) -> None:
        channel = self._loop_channel
        if channel is None:
            return
        if not self.read_ready(channel):
            self._unwatch_loop()
            self._on_eof(channel)
            return
        reader = self.reader
        if reader is None or reader.loop is not self._loop:
            self._unwatch_loop()

    def _unwatch_loop(self) -> None:
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._loop_fd)
        self._loop, self._loop_channel, self._loop_fd = None, None, -1

    def retire(self, channel: Channel) -> None:
        """Close a dead worker's channel; in the loop watching it, if one does (it must unwatch first)."""
        loop = self._loop
        if loop is not None and self._loop_channel is channel:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._retire_on_loop, channel)
                return
        channel.close()

    def _retire_on_loop(self, channel: Channel) -> None:
        if self._loop_channel is channel:
            self._unwatch_loop()
        channel.close()
