"""Where a decoupled request's responses go as they arrive: an event loop's queue or a thread's.

The thread that reads a worker's channel puts each response into the request's sink (thread-safe);
the request's consumer (a front door's stream on an event loop, or a BLS call's thread) takes them in
order, the last one ``final``. A consumer that leaves early cancels the sink: what still arrives is
dropped, and the worker is told (its senders' ``is_cancelled()``).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable

from servelab.backends.base import Executed, StreamItem
from servelab.errors import ServelabError

__all__ = ["AsyncSink", "OpenStreams", "StreamSink", "ThreadSink"]


class StreamSink:
    """One decoupled request's responses in order; ``executed`` is its execution's timing once known."""

    def __init__(self) -> None:
        self.executed: Executed | None = None
        self.cancelled = False
        self.finished = False
        #: told when the consumer cancels (the dispatcher sends CANCEL to the worker)
        self.on_cancel: Callable[[], None] | None = None
        self._lock = threading.Lock()

    def put(self, item: StreamItem) -> None:
        """Deliver one response (any thread); nothing after the final one or after a cancel."""
        with self._lock:
            if self.finished or self.cancelled:
                return
            self.finished = item.final
        self._deliver(item)

    def _deliver(self, item: StreamItem) -> None:
        raise NotImplementedError

    def cancel(self) -> None:
        """The consumer has gone: drop what comes and tell the worker (once)."""
        with self._lock:
            if self.cancelled or self.finished:
                return
            self.cancelled = True
        if self.on_cancel is not None:
            self.on_cancel()


class AsyncSink(StreamSink):
    """Responses for a consumer on ``loop`` (``await sink.get()``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.loop = loop
        self._queue: asyncio.Queue[StreamItem] = asyncio.Queue()

    def _deliver(self, item: StreamItem) -> None:
        try:
            here = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            here = False
        if here:
            self._queue.put_nowait(item)
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody reads any more
            self.loop.call_soon_threadsafe(self._queue.put_nowait, item)

    async def get(self) -> StreamItem:
        return await self._queue.get()


class ThreadSink(StreamSink):
    """Responses for a consumer thread (``sink.get(timeout_s)``)."""

    def __init__(self) -> None:
        super().__init__()
        self._queue: queue.Queue[StreamItem] = queue.Queue()

    def _deliver(self, item: StreamItem) -> None:
        self._queue.put(item)

    def get(self, timeout_s: float) -> StreamItem | None:
        """The next response, or None when none came within ``timeout_s``."""
        try:
            return self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None


class OpenStreams:
    """One worker's decoupled requests whose final response has not come, by request id (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sinks: dict[int, StreamSink] = {}

    def __len__(self) -> int:
        return len(self._sinks)

    def add(self, request_id: int, sink: StreamSink) -> None:
        with self._lock:
            self._sinks[request_id] = sink

    def drop(self, request_id: int) -> None:
        """Forget a request: what still comes for it is read and dropped."""
        with self._lock:
            self._sinks.pop(request_id, None)

    def deliver(self, request_id: int, item: StreamItem) -> None:
        """One response to its sink; the final one closes the request."""
        with self._lock:
            sink = self._sinks.pop(request_id, None) if item.final else self._sinks.get(request_id)
        if sink is not None:
            sink.put(item)

    def fail_all(self, error: ServelabError) -> None:
        """Every open request ends with ``error`` (its worker died or the instance closed)."""
        with self._lock:
            sinks, self._sinks = list(self._sinks.values()), {}
        for sink in sinks:
            sink.put(StreamItem(error=error, final=True))
