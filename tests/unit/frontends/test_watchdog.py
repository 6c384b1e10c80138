"""The event-loop watchdog logs a stall over 100 ms with how long it lasted."""

from __future__ import annotations

import asyncio
import logging
import re
import time

import pytest

from servelab.frontends.watchdog import watch_loop


def test_a_blocked_loop_is_logged_with_the_stall_duration(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        watchdog = asyncio.create_task(watch_loop(threshold_s=0.1, interval_s=0.02))
        await asyncio.sleep(0.05)  # let the watchdog start its first sleep
        time.sleep(0.4)  # something blocks the loop
        await asyncio.sleep(0.1)  # the watchdog wakes late and logs
        watchdog.cancel()

    with caplog.at_level(logging.WARNING, logger="servelab.watchdog"):
        asyncio.run(main())
    stalls = [float(m.group(1)) for r in caplog.records if (m := re.search(r"stalled for (\d+) ms", r.getMessage()))]
    assert stalls and max(stalls) >= 350
