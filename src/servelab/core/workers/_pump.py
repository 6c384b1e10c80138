"""The worker's side of reading its channel: any thread may wait for a message, one of them reads.

The main thread waits for the next request; a thread inside the model waits for the answer to its call
(one answer, or the next of a stream's); whoever reads files what it got: requests in the inbox,
answers by call id, cancellations of decoupled requests in :attr:`Pump.cancelled`.

After a request the server flagged ``linger`` (its event loop looked idle when it sent it: one request at a
time, CPU to spare), the main thread polls the socket for the next request for up to ``spin_us`` instead
of sleeping in ``recv``: on a virtual machine the sleeper's wake-up costs tens of microseconds per request.
It polls only while the typical gap between an answer and the next request (an average of recent gaps)
is shorter than that budget, so a trickle of requests costs no CPU; while few recent requests were already
there when it looked (several clients keep it busy without polling); and while no thread on the machine
waits for a CPU (the kernel's count of runnable threads, ``/proc/loadavg``, at most one per CPU): polling on a
full machine would take the CPU from the server itself.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from servelab.core.workers._channel import (
    CALL_ITEM,
    CALL_RESULT,
    CANCEL,
    EXECUTE,
    QUERY_RESULT,
    STREAM,
    Channel,
)

__all__ = ["Pump"]

_ANSWERS = (CALL_RESULT, QUERY_RESULT)
#: weight of the newest sample in the moving averages (gap to the next request, share already waiting)
_GAP_WEIGHT = 0.2
#: polls of the socket between two looks at the machine's run queue
_POLLS_PER_LOOK = 8
#: looks in a row that found it crowded before the polling stops (~140 us: a blip is not a queue)
_CROWDED_LOOKS = 8
#: share of recent requests that were already waiting when the worker looked, above which it does not poll
_QUEUED_SHARE = 0.25


class RunQueue:
    """Whether a thread on this machine waits for a CPU: more runnable threads than CPUs (Linux's
    ``/proc/loadavg``; elsewhere it never says so)."""

    def __init__(self) -> None:
        self.cpus = os.cpu_count() or 1
        try:
            self._fd = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._fd = -1

    def crowded(self) -> bool:
        if self._fd < 0:
            return False
        try:  # "0.52 0.41 0.30 3/153 4080": the fourth field is runnable/all threads, the caller included
            return int(os.pread(self._fd, 128, 0).split()[3].split(b"/")[0]) > self.cpus
        except (OSError, ValueError, IndexError):
            return False


class Pump:
    """Lets any thread of the worker wait for a message (see the module docstring)."""

    def __init__(self, channel: Channel, spin_us: int = 0) -> None:
        self.channel = channel
        self.spin_ns = spin_us * 1000
        #: the typical wait for the next request after a lingering one (moving average)
        self.gap_ns = 0.0
        #: the share of recent lingering waits whose request was already there (moving average)
        self.queued_share = 0.0
        self.run_queue = RunQueue() if spin_us else None
        self._cond = threading.Condition(threading.Lock())
        self._reading = False
        self._gone = False
        self._inbox: deque[tuple[int, int, Any]] = deque()
        self._answers: dict[int, Any] = {}
        self._items: dict[int, deque[Any]] = {}
        #: ids of decoupled requests whose client has gone
        self.cancelled: set[int] = set()

    def next_request(self, linger: bool = False) -> tuple[int, int, Any]:
        """The next request; ``linger``: the last one was flagged so (see the module docstring)."""
        return self._wait(lambda: self._inbox.popleft() if self._inbox else None, linger)

    def answer(self, call_id: int) -> Any:
        return self._wait(lambda: self._answers.pop(call_id, None))

    def expect_items(self, call_id: int) -> None:
        """Keep the responses of stream call ``call_id`` (before sending it: they may come at once)."""
        with self._cond:
            self._items[call_id] = deque()

    def next_item(self, call_id: int) -> Any:
        """The next response of stream call ``call_id``, waiting for it."""
        queue = self._items[call_id]
        return self._wait(lambda: queue.popleft() if queue else None)

    def drop_items(self, call_id: int) -> None:
        with self._cond:
            self._items.pop(call_id, None)

    def _wait(self, take: Callable[[], Any], linger: bool = False) -> Any:
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
                    message = self._read_lingering() if linger and self.spin_ns else self._read()
                finally:
                    self._cond.acquire()
                    self._reading = False
                    self._cond.notify_all()
                self._file(message)

    def _read_lingering(self) -> tuple[int, int, Any] | None:
        """:meth:`_read`, polling first while the gaps between requests stay under the budget."""
        start = time.perf_counter_ns()
        try:
            got = self.channel.recv_ready()
        except (EOFError, OSError):
            return None
        self.queued_share += _GAP_WEIGHT * ((got is not None) - self.queued_share)
        if got is None and self.gap_ns <= self.spin_ns and self.queued_share < _QUEUED_SHARE and self.run_queue is not None:
            end = start + self.spin_ns
            recv_ready, crowded = self.channel.recv_ready, self.run_queue.crowded
            polls = looks = 0
            try:
                while (got := recv_ready()) is None and time.perf_counter_ns() < end:
                    if polls % _POLLS_PER_LOOK == 0:
                        looks = looks + 1 if crowded() else 0
                        if looks == _CROWDED_LOOKS:
                            break
                    polls += 1
            except (EOFError, OSError):
                return None
        message = self._read(got)
        self.gap_ns += _GAP_WEIGHT * (time.perf_counter_ns() - start - self.gap_ns)
        return message

    def _read(self, got: tuple[int, int, Any] | None = None) -> tuple[int, int, Any] | None:
        """One message with its tensors materialised: views for requests (valid while they run), copies
        for answers and for decoupled requests (their model may keep using them after execute returns)."""
        try:
            kind, msg_id, body = self.channel.recv() if got is None else got
        except (EOFError, OSError):
            return None
        if kind == EXECUTE:
            linger, requests = body
            body = (linger, [self.channel.arrays(descriptors, copy=False) for descriptors in requests])
        elif kind == STREAM:
            body = [(self.channel.arrays(d, copy=True), *extras) for d, *extras in body]
        elif kind == CALL_RESULT and body[0] == 0:
            body = (0, self.channel.arrays(body[1], copy=True))
        elif kind == CALL_ITEM and body[0] is not None and body[0][0] == 0:
            body = ((0, self.channel.arrays(body[0][1], copy=True)), *body[1:])
        return kind, msg_id, body

    def _file(self, message: tuple[int, int, Any] | None) -> None:
        if message is None:
            self._gone = True
            return
        kind, msg_id, body = message
        if kind in _ANSWERS:
            self._answers[msg_id] = body
        elif kind == CALL_ITEM:
            queue = self._items.get(msg_id)
            if queue is not None:  # else: a cancelled call's late response
                queue.append(body)
        elif kind == CANCEL:
            self.cancelled.add(msg_id)
        else:
            self._inbox.append(message)
