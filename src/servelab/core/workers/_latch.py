"""Small waiting primitives of the dispatcher: a latch a thread waits on, and settling a future from any thread."""

from __future__ import annotations

import asyncio
import contextlib
import threading

from servelab.backends.base import Executed

__all__ = ["Latch", "settle_on"]


class Latch:
    """A one-bit signal a thread waits on with a timeout (a bare lock: cheaper than an Event)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def set(self, _: object = None) -> None:
        with contextlib.suppress(RuntimeError):  # already set
            self._lock.release()

    def clear(self) -> None:
        self._lock.acquire(blocking=False)

    def wait(self, timeout_s: float) -> None:
        if self._lock.acquire(timeout=timeout_s):
            self._lock.release()


def settle_on(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Executed], executed: Executed) -> None:
    """Resolve ``future`` from any thread: directly when already in its loop (the loop read the answer)."""
    try:
        here = asyncio.get_running_loop() is loop
    except RuntimeError:
        here = False
    if here:
        _settle(future, executed)
        return
    with contextlib.suppress(RuntimeError):  # the loop has closed
        loop.call_soon_threadsafe(_settle, future, executed)


def _settle(future: asyncio.Future[Executed], executed: Executed) -> None:
    if not future.done():
        future.set_result(executed)
