"""The worker's side of reading its channel: any thread may wait for a message, one of them reads.

The main thread waits for the next request; a thread inside the model waits for the answer to its call
(one answer, or the next of a stream's); whoever reads files what it got: requests in the inbox,
answers by call id, cancellations of decoupled requests in :attr:`Pump.cancelled`.
"""

from __future__ import annotations

import threading
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


class Pump:
    """Lets any thread of the worker wait for a message (see the module docstring)."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self._cond = threading.Condition(threading.Lock())
        self._reading = False
        self._gone = False
        self._inbox: deque[tuple[int, int, Any]] = deque()
        self._answers: dict[int, Any] = {}
        self._items: dict[int, deque[Any]] = {}
        #: ids of decoupled requests whose client has gone
        self.cancelled: set[int] = set()

    def next_request(self) -> tuple[int, int, Any]:
        return self._wait(lambda: self._inbox.popleft() if self._inbox else None)

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
        """One message with its tensors materialised: views for requests (valid while they run), copies
        for answers and for decoupled requests (their model may keep using them after execute returns)."""
        try:
            kind, msg_id, body = self.channel.recv()
        except (EOFError, OSError):
            return None
        if kind == EXECUTE:
            body = [self.channel.arrays(descriptors, copy=False) for descriptors in body]
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
