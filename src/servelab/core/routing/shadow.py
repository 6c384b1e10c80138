"""Shadow copies, bounded: past ``capacity`` copies waiting or running, new copies are shed (counted by
the caller's comparison) and the request that would have been copied is untouched.

A copy submitted from the event loop (the servers' requests) runs **on that loop**, after the requests that
are ready: up to ``threads`` drainer tasks take one copy each per loop turn and run it through the other
version's scheduler the way a request would (inline for a fast model, in its pool or worker otherwise).
Copies in threads of their own fought the loop for the GIL: on 2 cores at 30% load the primaries' P99 went
from 1.9 ms to 59 ms (benchmarks/shadow_overhead.py, 2026-12-01). A copy submitted from a plain thread (the
in-process API) runs on a small executor instead. :meth:`ShadowPool.submit` never waits.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

__all__ = ["ShadowPool"]

log = logging.getLogger("servelab.routing")


class ShadowPool:
    """``threads`` copies at once (drainer tasks on a loop, or threads); at most ``capacity`` waiting or running."""

    def __init__(self, threads: int, capacity: int) -> None:
        self.capacity = capacity
        self.threads = threads
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="servelab-shadow")
        self._lock = threading.Lock()
        self._in_flight = 0
        self.submitted = 0
        self.shed = 0
        #: per event loop: copies waiting for a drainer, and how many drainers run
        self._queues: dict[asyncio.AbstractEventLoop, collections.deque[Callable[[], Awaitable[None]]]] = {}
        self._drainers: dict[asyncio.AbstractEventLoop, int] = {}
        #: the running drainer tasks (the loop keeps only weak references to tasks)
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def submit(self, job: Callable[[], None], on_loop: Callable[[], Awaitable[None]] | None = None) -> bool:
        """Queue the copy: ``on_loop`` when called on a running event loop, else ``job`` on the executor;
        False (and counted as shed) when the pool is full or closed."""
        with self._lock:
            if self._in_flight >= self.capacity or self._closed:
                self.shed += 1
                return False
            self._in_flight += 1
            self.submitted += 1
        loop = _running_loop() if on_loop is not None else None
        if loop is not None and on_loop is not None:
            self._queues.setdefault(loop, collections.deque()).append(on_loop)
            if self._drainers.get(loop, 0) < self.threads:
                self._drainers[loop] = self._drainers.get(loop, 0) + 1
                task = loop.create_task(self._drain(loop), name="servelab-shadow")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            return True
        try:
            self._executor.submit(self._run, job)
        except RuntimeError:  # shut down: the server is stopping
            self._release()
            with self._lock:
                self.shed += 1
            return False
        return True

    async def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run this loop's copies one at a time, yielding a loop turn before each (ready requests first)."""
        queue = self._queues[loop]
        try:
            while queue and not self._closed:
                await asyncio.sleep(0)
                if not queue:
                    break
                job = queue.popleft()
                try:
                    await job()
                except Exception:  # a copy must never take anything down
                    log.exception("a shadow copy failed outside its own error handling")
                finally:
                    self._release()
        finally:
            self._drainers[loop] -= 1
            if self._closed:  # copies not started are dropped, as the executor drops its queue
                while queue:
                    queue.popleft()
                    self._release()

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
        except Exception:  # a copy must never take anything down
            log.exception("a shadow copy failed outside its own error handling")
        finally:
            self._release()

    def _release(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def close(self) -> None:
        """Drop copies not started yet; copies running finish (in their threads or drainer tasks)."""
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
