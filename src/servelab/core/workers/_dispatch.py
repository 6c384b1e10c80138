"""The request side of a worker instance: its queue, the running request, and reading the channel.

Requests queue here (queue time) and go to the worker one execution at a time; while one plain
request runs, the next is already sent (pipelined), so the worker finds it as soon as it is done and
neither side waits for the other to wake up. The waiter of the running request reads the worker's
socket itself, so no thread hop lies on the way back: a thread in :meth:`Dispatcher.execute_timed`, or the event loop (``add_reader``) for
:meth:`Dispatcher.execute_async`. Whoever reads a result starts the next request and hands the
reading to that request's waiter. A call from the worker into the server (``ctx.infer`` in the
worker, Triton's BLS) goes to a thread pool that answers it while the request still runs
(:mod:`._serving`). When no waiter reads while a request runs (its waiter was answered at the
deadline), the supervisor does.

A decoupled request (:meth:`Dispatcher.open_stream`) occupies the worker while its ``execute`` runs,
like any other, but its responses (RESPONSE messages) may keep coming after that, interleaved with later
requests; they go to the request's :class:`~._sinks.StreamSink` until the final one. The supervisor
reads for open streams (one thread hop to the consumer, which suits a stream).

How an event loop reads for its requests (and polls a fast worker): :mod:`._loop_reading`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from servelab.backends.base import Executed, Inputs, Outputs, StreamItem, StreamRequest
from servelab.core.workers._channel import (
    CANCEL,
    EXECUTE,
    RESPONSE,
    RESULT,
    STREAM,
    Channel,
    Put,
    error_from,
)
from servelab.core.workers._latch import Latch, settle_on
from servelab.core.workers._loop_reading import AWAITING, LINGER_ALLOWED, LoopLoad, LoopReading, Ticket
from servelab.core.workers._serving import KINDS as CALL_KINDS
from servelab.core.workers._serving import WorkerCalls
from servelab.core.workers._sinks import OpenStreams, StreamSink
from servelab.errors import InternalError, ServelabError, Unavailable

__all__ = ["Dispatcher", "Ticket"]

log = logging.getLogger("servelab.workers")

TICK_S = 0.1  #: how often waiters (and the supervisor) look again when nothing happens


class Dispatcher(LoopReading):
    """Queue and running request of one worker; ``state`` READY lets requests through.

    The supervisor owns ``channel`` and ``state`` (under ``lock``), ``kill`` and ``wake`` reach it.
    """

    def __init__(self, label: str, serving: WorkerCalls, kill: Callable[[str], None], wake: Callable[[], None],
                 *, spin_us: int = 0) -> None:
        self.label = label
        self.spin_ns = spin_us * 1000
        #: typical time from sending a request to its answer (EWMA; starts at the spin budget)
        self.turnaround_ns = float(self.spin_ns)
        self.serving = serving
        self._kill = kill
        self._wake = wake
        self.lock = threading.Lock()
        self.up = threading.Condition(self.lock)
        self._recv_lock = threading.Lock()
        self.queue: deque[Ticket] = deque()
        self.active: Ticket | None = None
        #: sent behind ``active`` (it starts when that one's result comes); never a stream, nor behind one
        self.pipelined: Ticket | None = None
        self.reader: Ticket | None = None  # whose waiter reads now; None while active: the supervisor
        #: decoupled requests whose final response has not come
        self.streams = OpenStreams()
        self.state = "STARTING"
        self.down_reason = "starting"
        self.channel: Channel | None = None
        self.eof: Channel | None = None  # a channel some reader saw closed
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop watching the socket, if any
        self._loop_channel: Channel | None = None
        self._loop_fd = -1

    # ----- requests -----
    def execute_timed(self, requests: list[Inputs]) -> Executed:
        """Run ``requests`` in the worker; this thread reads the answer when it is its turn."""
        woken = Latch()
        ticket = Ticket(next(self._ids), requests, time.perf_counter_ns(), woken.set, woken=woken)
        self.submit(ticket)
        self._wait(ticket)
        assert ticket.executed is not None
        return ticket.executed

    async def execute_async(self, requests: list[Inputs]) -> Executed:
        """Like execute_timed without a thread: this event loop reads the worker's answer."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Executed] = loop.create_future()
        ticket = Ticket(next(self._ids), requests, time.perf_counter_ns(),
                        lambda e: settle_on(loop, future, e), loop=loop)
        load = AWAITING.get(loop)
        if load is None:
            load = AWAITING[loop] = LoopLoad()
        load.awaiting += 1
        try:
            alone = load.awaiting == 1 and self.spin_ns
            if alone:
                load.sample()
                ticket.linger = load.idle() and LINGER_ALLOWED.get()
            self.submit(ticket)
            if alone and self.reader is ticket and self._loop is loop:
                self._spin(future, load)
            return await future
        except asyncio.CancelledError:
            ticket.cancelled = True  # a queued one is skipped; a running one's answer is dropped
            raise
        finally:
            load.awaiting -= 1

    def open_stream(self, request: StreamRequest, sink: StreamSink) -> None:
        """Run a decoupled request in the worker; every response goes to ``sink``, the last one final."""
        ticket = Ticket(next(self._ids), [request.inputs], time.perf_counter_ns(), lambda e: self._executed(ticket, e),
                        sink=sink, extras=(request.parameters, request.outputs, request.request_id))  # fmt: skip
        sink.on_cancel = lambda: self._cancel(ticket)
        self.streams.add(ticket.id, sink)
        self.submit(ticket)

    def _executed(self, ticket: Ticket, executed: Executed) -> None:
        """A decoupled request's execute returned (or failed: the error is its final response)."""
        sink = ticket.sink
        assert sink is not None
        sink.executed = executed
        error = next((r for r in executed.results if isinstance(r, ServelabError)), None)
        if error is not None:
            self.streams.deliver(ticket.id, StreamItem(error=error, final=True))

    def _cancel(self, ticket: Ticket) -> None:
        """The consumer of a decoupled request has gone: a queued one is skipped, a running one told."""
        ticket.cancelled = True
        self.streams.drop(ticket.id)
        channel = self.channel
        if ticket.started_ns and channel is not None:
            with contextlib.suppress(OSError):
                channel.send(CANCEL, ticket.id)

    def submit(self, ticket: Ticket) -> None:
        claimed = refused = None
        with self.lock:
            if self.state == "READY":
                self.queue.append(ticket)
                claimed = self.claim()
            elif self.state == "CLOSED":
                refused = Unavailable(f"{self.label} is unloading")
            else:
                refused = Unavailable(f"{self.label} is not ready: {self.down_reason}")
        if refused is not None:
            self.fail([ticket], refused)
        elif claimed is not None:
            self.start(claimed)

    def claim(self) -> Ticket | None:
        """Under the lock: the next live queued ticket to send, if the worker is free (it runs, its waiter
        reads), or if it runs one plain request with none behind it (it is pipelined); None otherwise."""
        active = self.active
        if self.state != "READY" or (active is not None and (self.pipelined is not None or active.sink is not None)):
            return None
        queue = self.queue
        while queue:
            ticket = queue[0]
            if ticket.cancelled or ticket.answered:
                queue.popleft()
                if ticket.sink is not None:
                    self.streams.drop(ticket.id)  # cancelled before it ran
                continue
            if active is not None and ticket.sink is not None:
                return None  # a stream waits until the worker is free
            queue.popleft()
            ticket.claimed_ns = time.perf_counter_ns()
            if active is not None:
                self.pipelined = ticket
                return ticket
            ticket.started_ns = ticket.claimed_ns
            self.active = ticket
            self.reader = ticket if ticket.sink is None else None  # a stream's: the supervisor reads
            return ticket
        return None

    def in_worker(self) -> list[Ticket]:
        """Under the lock: take the tickets sent to the worker (running, pipelined) off it, for failing."""
        sent = [t for t in (self.active, self.pipelined) if t is not None]
        self.active = self.pipelined = self.reader = None
        return sent

    def start(self, ticket: Ticket) -> None:
        """Send a claimed ticket to the worker and hand the reading to its waiter."""
        channel = self.channel
        assert channel is not None

        def body(put: Put) -> Any:
            if ticket.extras is not None:
                descriptors: list[Any] = [(put(r), *ticket.extras) for r in ticket.requests]
            else:
                descriptors = [put(r) for r in ticket.requests]
            ticket.sent_ns = time.perf_counter_ns()
            ticket.input_ns = ticket.sent_ns - ticket.claimed_ns
            return descriptors if ticket.sink is not None else (ticket.linger, descriptors)

        try:
            channel.send(STREAM if ticket.sink is not None else EXECUTE, ticket.id, build=body, owner=ticket.id)
        except OSError:
            pass  # the worker is gone: the supervisor fails the ticket
        except Exception as exc:  # e.g. a tensor that cannot cross: fail it, run the next one
            channel.release(ticket.id)
            with self.lock:
                if self.active is ticket:
                    self.active = self.reader = None
                elif self.pipelined is ticket:
                    self.pipelined = None
                following = self.claim()
            self.fail([ticket], exc if isinstance(exc, ServelabError) else InternalError(str(exc)))
            if following is not None:
                self.start(following)
            return
        if ticket is self.active:  # a pipelined one's waiter reads once it runs (_result hands it over)
            self._hand_reading(ticket)

    def answer(self, ticket: Ticket, executed: Executed) -> None:
        with self.lock:
            if ticket.answered:
                return
            ticket.answered, ticket.executed = True, executed
        ticket.deliver(executed)

    def fail(self, tickets: list[Ticket], error: ServelabError) -> None:
        for t in tickets:
            self.answer(t, Executed([error] * len(t.requests)))

    def drain_queue(self) -> list[Ticket]:
        out = [t for t in self.queue if not t.answered]
        self.queue.clear()
        return out

    # ----- reading: by the running request's waiter -----
    def _wait(self, ticket: Ticket) -> None:
        """A sync waiter: read the socket while it is this ticket's turn, else wait to be woken."""
        woken = ticket.woken
        assert woken is not None
        while True:
            woken.clear()
            if ticket.answered:
                break
            channel = self.channel
            if self.reader is ticket and channel is not None and self.eof is not channel:
                if channel.readable(TICK_S) and not self.read_ready(channel):
                    self._on_eof(channel)
                continue
            woken.wait(TICK_S)
        with self.lock:  # answered at the deadline while still running: the supervisor reads on
            orphaned = self.reader is ticket
            if orphaned:
                self.reader = None
        if orphaned:
            self._wake()

    def read_ready(self, channel: Channel) -> bool:
        """Handle the message waiting on ``channel`` (one: poll says when there is another);
        False when the worker's end has closed."""
        with self._recv_lock:
            try:
                message = channel.recv_ready()
            except (EOFError, OSError, ValueError):
                return False
            if message is None:
                return True
            kind, msg_id, body = message
            try:
                if kind == RESULT:
                    self._result(channel, msg_id, body)
                elif kind == RESPONSE:
                    self._response(channel, msg_id, body)
                elif kind in CALL_KINDS:
                    self.serving.handle(channel, kind, msg_id, body)
                else:
                    raise ValueError(f"unexpected message kind {kind}")
            except Exception:  # whoever reads must survive a worker that breaks the protocol
                log.exception("%s: bad message from the worker: killing it", self.label)
                self._kill("broke the channel protocol")
                return False
            return True

    def _on_eof(self, channel: Channel) -> None:
        self.eof = channel
        self._wake()  # the supervisor makes sure the process is gone

    def _result(self, channel: Channel, msg_id: int, body: Any) -> None:
        received_ns = time.perf_counter_ns()
        entries, child_input_ns, _, child_output_ns = body
        results: list[Outputs | ServelabError] = [
            channel.arrays(e[1], copy=True) if e[0] == 0 else error_from(e[1], e[2]) for e in entries
        ]
        channel.done_reading()
        channel.release(msg_id)
        copy_ns = time.perf_counter_ns() - received_ns
        promoted = None
        with self.lock:
            ticket = self.active
            if ticket is not None and ticket.id == msg_id:  # the pipelined one runs now, its waiter reads
                promoted = self.active = self.reader = self.pipelined
                self.pipelined = None
            elif self.pipelined is not None and self.pipelined.id == msg_id:
                # two threads raced to send and the pipelined one reached the worker first: the active one runs now
                ticket, self.pipelined = self.pipelined, None
                ticket.started_ns, promoted = max(ticket.claimed_ns, ticket.sent_ns), self.active
            else:
                return
            if promoted is not None:
                promoted.started_ns = received_ns
                if promoted.answered and promoted.loop is None:  # answered at its deadline while pipelined:
                    self.reader = None  # its waiting thread has left, the supervisor reads
            following = self.claim()
            answered, ticket.answered = ticket.answered, True
            ran_from = max(ticket.sent_ns, ticket.started_ns)  # a pipelined one waited in the worker
            self.turnaround_ns += (received_ns - ran_from - self.turnaround_ns) * 0.1
            if not answered:
                ticket.executed = Executed(
                    results,
                    input_ns=ticket.input_ns + child_input_ns,
                    infer_ns=max(0, received_ns - ran_from - child_input_ns - child_output_ns),
                    output_ns=child_output_ns + copy_ns,
                    queue_ns=ticket.started_ns - ticket.enqueued_ns,
                )
        if following is not None:
            self.start(following)  # keep the worker busy before handing this answer back
        elif self.streams:
            self._wake()  # responses of open streams may still come: the supervisor reads them
        if promoted is not None:
            self._hand_reading(promoted) if self.reader is promoted else self._wake()
        if not answered and ticket.executed is not None:
            ticket.deliver(ticket.executed)

    def _response(self, channel: Channel, msg_id: int, body: Any) -> None:
        """One response of a decoupled request: to its sink (dropped when nobody waits for it any more)."""
        _, entry, final, parameters = body
        item = StreamItem(final=final, parameters=parameters)
        if entry is not None:
            if entry[0] == 0:
                item.outputs = channel.arrays(entry[1], copy=True)
            else:
                item.error = error_from(entry[1], entry[2])
        channel.done_reading()
        self.streams.deliver(msg_id, item)
