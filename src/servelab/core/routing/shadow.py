"""Shadow copies on their own executor, bounded: past ``capacity`` copies waiting or running, new copies
are shed (counted by the caller's comparison) and the request that would have been copied is untouched.

The event loop only ever calls :meth:`ShadowPool.submit`, which takes a lock and hands the job to a
thread (no waiting); the copy runs the other version's scheduler in that thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

__all__ = ["ShadowPool"]

log = logging.getLogger("servelab.routing")


class ShadowPool:
    """``threads`` threads for shadow copies; at most ``capacity`` copies in the pool at once."""

    def __init__(self, threads: int, capacity: int) -> None:
        self.capacity = capacity
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="servelab-shadow")
        self._lock = threading.Lock()
        self._in_flight = 0
        self.submitted = 0
        self.shed = 0

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def submit(self, job: Callable[[], None]) -> bool:
        """Queue ``job``; False (and counted as shed) when the pool is full or closed."""
        with self._lock:
            if self._in_flight >= self.capacity:
                self.shed += 1
                return False
            self._in_flight += 1
            self.submitted += 1
        try:
            self._executor.submit(self._run, job)
        except RuntimeError:  # shut down: the server is stopping
            self._release()
            with self._lock:
                self.shed += 1
            return False
        return True

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
        """Drop copies not started yet; copies running finish in their threads."""
        self._executor.shutdown(wait=False, cancel_futures=True)
