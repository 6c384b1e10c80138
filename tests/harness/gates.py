"""Gates: hold a request inside a model until the test lets it go, so that tests about in-flight work
(drain, shutdown, queue timeouts, priorities, overload) wait on a signal, never on a sleep.

- :class:`SocketGate`: for models in another process (a server subprocess, a Python-backend worker):
  the ``gated`` model (harness.models.GATED_PY) connects to the gate's port when it starts executing
  and answers after the test releases it.
- :class:`ThreadGate`: for backends that run in the test's own process (unit tests open no sockets).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from types import TracebackType

__all__ = ["HeldCall", "SocketGate", "ThreadGate"]

GATE_TIMEOUT_S = 60.0
_ENTERED = b"entered"


class HeldCall:
    """One model execution waiting at a :class:`SocketGate`."""

    def __init__(self, conn: socket.socket) -> None:
        self._conn = conn

    def release(self) -> None:
        """Let the execution answer."""
        self._conn.sendall(b"g")

    def wait_finished(self) -> None:
        """Block until the model has left the gate (it closes its end once released)."""
        while self._conn.recv(64):
            pass

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> HeldCall:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SocketGate:
    """A listener on 127.0.0.1:<port> that gated models call into; ``with SocketGate() as gate``."""

    def __init__(self, timeout_s: float = GATE_TIMEOUT_S) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(timeout_s)
        self.timeout_s = timeout_s

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def wait_entered(self) -> HeldCall:
        """The next execution that reaches the gate (raises TimeoutError after ``timeout_s``)."""
        conn, _ = self._listener.accept()
        conn.settimeout(self.timeout_s)
        got = b""
        while len(got) < len(_ENTERED):
            chunk = conn.recv(len(_ENTERED) - len(got))
            if not chunk:
                break
            got += chunk
        if got != _ENTERED:
            conn.close()
            raise AssertionError(f"the gate expected {_ENTERED!r} from the model, got {got!r}")
        return HeldCall(conn)

    def close(self) -> None:
        self._listener.close()

    def __enter__(self) -> SocketGate:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class ThreadGate:
    """Holds in-process calls (a test backend calls :meth:`hold`) until the test calls :meth:`open`.

    It counts the calls held (``entered``) and those the backend let through without holding
    (``passed``, reported with :meth:`passing`), so a test can wait until N are inside or done.
    """

    def __init__(self, timeout_s: float = GATE_TIMEOUT_S) -> None:
        self._cond = threading.Condition()
        self._open = False
        self.entered = 0
        self.passed = 0
        self.timeout_s = timeout_s

    def hold(self) -> None:
        """Called by the backend: count this call, then wait until the gate opens."""
        with self._cond:
            self.entered += 1
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: self._open, self.timeout_s):
                raise TimeoutError(f"the test never opened the gate within {self.timeout_s} s")

    def passing(self) -> None:
        """Called by the backend for a call it does not hold, once that call has done its work."""
        with self._cond:
            self.passed += 1
            self._cond.notify_all()

    def wait_entered(self, count: int = 1) -> None:
        """Block until ``count`` calls are (or were) held at the gate."""
        self._wait(lambda: self.entered >= count, f"{count} calls held")

    def wait_passed(self, count: int = 1) -> None:
        """Block until ``count`` calls went through without being held."""
        self._wait(lambda: self.passed >= count, f"{count} calls through")

    async def entered_async(self, count: int = 1) -> None:
        """:meth:`wait_entered` without blocking the event loop."""
        await asyncio.to_thread(self.wait_entered, count)

    async def passed_async(self, count: int = 1) -> None:
        """:meth:`wait_passed` without blocking the event loop."""
        await asyncio.to_thread(self.wait_passed, count)

    def _wait(self, reached: Callable[[], bool], what: str) -> None:
        with self._cond:
            if not self._cond.wait_for(reached, self.timeout_s):
                raise AssertionError(
                    f"not {what} within {self.timeout_s} s ({self.entered} held, {self.passed} through)"
                )

    def open(self) -> None:
        """Let every held call (and every later one) through."""
        with self._cond:
            self._open = True
            self._cond.notify_all()
