"""Process-wide signal behaviour for the CLI and the measuring scripts (standard library only, so a server's
imports stay lean)."""

from __future__ import annotations

import signal

__all__ = ["exit_on_sigterm"]


def exit_on_sigterm() -> None:
    """Make SIGTERM end this process the way Ctrl-C does: as ``SystemExit(143)`` raised in the main thread, so
    ``finally`` blocks and context managers run and the servers it started are stopped. Python's default
    SIGTERM ends the process at once and leaves its child servers running, holding ports and cores (a timed-out
    benchmark or a ``timeout`` wrapper sends SIGTERM). For scripts and the CLI; a server installs its own."""

    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)
