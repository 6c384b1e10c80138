"""How a batcher's worker thread hands a result back to the event loop that is awaiting it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from servelab.backends.base import Outputs
from servelab.errors import ServelabError

__all__ = ["Result", "awaiting"]

Result = Outputs | ServelabError


def awaiting() -> tuple[asyncio.Future[Outputs], Callable[[Result], None]]:
    """A future of the running loop and a thread-safe callable that resolves it (once, unless cancelled)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Outputs] = loop.create_future()

    def deliver(result: Result) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed (server shutting down)
            loop.call_soon_threadsafe(_resolve, future, result)

    return future, deliver


def _resolve(future: asyncio.Future[Outputs], result: Result) -> None:
    if future.done():  # the client went away
        return
    if isinstance(result, ServelabError):
        future.set_exception(result)
    else:
        future.set_result(result)
