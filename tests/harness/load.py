"""Background load: a client that keeps sending one request while a test does something else to the server
(a huge body, a malformed request), so the test can show that other clients went on being served."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import httpx

__all__ = ["RequestLoop"]


def _status_200(response: httpx.Response) -> bool:
    return response.status_code == 200


class RequestLoop:
    """POSTs ``body`` to ``url`` again and again on one kept-alive connection, in a thread, from ``with``
    until the block ends (or ``max_requests`` were answered, or ``max_s`` passed). Records each answered
    request as (sent at, latency s, status) in :attr:`samples`, and in :attr:`failures` each answer that
    ``ok`` refuses (its text) and each transport error."""

    def __init__(self, url: str, body: bytes, *, ok: Callable[[httpx.Response], bool] = _status_200,
                 max_requests: int | None = None, max_s: float | None = None, timeout_s: float = 30.0) -> None:
        self.url, self.body, self.ok = url, body, ok
        self.samples: list[tuple[float, float, int]] = []
        self.failures: list[str] = []
        self._limits = (max_requests, max_s, timeout_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="request-loop", daemon=True)

    @property
    def statuses(self) -> list[int]:
        return [status for _, _, status in self.samples]

    def _run(self) -> None:
        max_requests, max_s, timeout_s = self._limits
        cap = math.inf if max_requests is None else max_requests
        deadline = time.monotonic() + (math.inf if max_s is None else max_s)
        with httpx.Client(timeout=timeout_s) as client:
            while not self._stop.is_set() and len(self.samples) < cap and time.monotonic() < deadline:
                started = time.monotonic()
                try:
                    r = client.post(self.url, content=self.body)
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                    continue
                self.samples.append((started, time.monotonic() - started, r.status_code))
                if not self.ok(r):
                    self.failures.append(r.text[:200])

    def __enter__(self) -> RequestLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
