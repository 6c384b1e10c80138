"""A watchdog for the event loop: logs every stall longer than a threshold (100 ms by default).

Nothing that can block may run on the loop (DESIGN.md); when something does anyway (a slow
callback, a blocking call in a route, a process starved of CPU), every port stops answering while
it runs. The watchdog is a task that sleeps ``interval_s`` and measures how late it woke up: the
lateness is how long the loop could not run anything.
"""

from __future__ import annotations

import asyncio
import logging

__all__ = ["watch_loop"]

log = logging.getLogger("servelab.watchdog")


async def watch_loop(threshold_s: float = 0.1, interval_s: float = 0.05) -> None:
    """Run until cancelled, logging a warning with the duration of each stall over ``threshold_s``."""
    loop = asyncio.get_running_loop()
    while True:
        before = loop.time()
        await asyncio.sleep(interval_s)
        stalled = loop.time() - before - interval_s
        if stalled > threshold_s:
            log.warning("event loop stalled for %.0f ms (over %.0f ms): something blocked it",
                        stalled * 1e3, threshold_s * 1e3)
