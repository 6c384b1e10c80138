"""Starting, greeting and stopping one worker process (the server's side of the handshake)."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servelab.backends.base import BackendContext
from servelab.core.workers._arena import ArenaWriter
from servelab.core.workers._channel import FAILED, LOAD, READY, STOP, Channel, error_from
from servelab.errors import InternalError, Unavailable

__all__ = ["exit_text", "handshake", "spawn", "stop", "wait"]

_SRC = str(Path(__file__).resolve().parents[3])  # the folder holding the servelab package


def spawn(target: str, ctx: BackendContext, arena_bytes: int, spin_us: int = 0) -> tuple[subprocess.Popen[bytes], Channel]:
    """Start ``python -m servelab.core.workers`` and send it what to load (``handshake`` waits for it).

    The worker gets the server's ``sys.path`` (so it imports what the server could) and its log level;
    it inherits stdout and stderr, so a model's prints and tracebacks land in the server's log.
    """
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_SRC, env.get("PYTHONPATH", "")) if p)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "servelab.core.workers", str(theirs.fileno()), str(os.getpid()), str(arena_bytes)],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env,
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    channel = Channel(ours, ArenaWriter(arena_bytes, f"s{proc.pid}"), release_acked=False)
    spec = {
        "backend": target, "model": ctx.model_name, "version": ctx.version, "version_dir": str(ctx.version_dir),
        "config": ctx.config.SerializeToString(), "threads": ctx.threads, "sys_path": list(sys.path),
        "log_level": logging.getLogger().getEffectiveLevel(), "spin_us": spin_us,
    }
    with contextlib.suppress(OSError):  # it died at once: the handshake reports how
        channel.send(LOAD, 0, spec)
    return proc, channel


def handshake(proc: subprocess.Popen[bytes], channel: Channel, label: str, timeout_s: float,
              serve: Callable[[Channel, int, int, Any], None] | None = None) -> None:
    """Wait until the worker has loaded its model; the error says why when it did not.

    What the model asks of the server while it loads (``initialize`` creating custom metrics) goes to
    ``serve``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        ready, _, _ = select.select([channel.sock], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise Unavailable(f"{label}: its worker process did not load the model within {timeout_s:g} s")
        try:
            kind, msg_id, body = channel.recv()
        except (EOFError, OSError):
            raise Unavailable(f"{label}: its worker process {exit_text(wait(proc, 5.0))} while loading") from None
        if kind in (FAILED, READY) or serve is None:
            break
        serve(channel, kind, msg_id, body)
    if kind == FAILED:
        error = error_from(body[0], body[1])
        raise type(error)(f"{label} failed to load in its worker process: {error.message}")
    if kind != READY:
        raise InternalError(f"{label}: worker process sent message {kind} instead of READY")


def stop(proc: subprocess.Popen[bytes], channel: Channel, grace_s: float) -> None:
    """Ask the worker to unload and exit; kill it if it has not within ``grace_s``."""
    with contextlib.suppress(OSError):
        channel.send(STOP, 0)
    if wait(proc, grace_s) is None:
        proc.kill()
        wait(proc, 5.0)


def wait(proc: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None


def exit_text(code: int | None) -> str:
    """How a worker went, for messages: 'was killed by signal 9 (SIGKILL)', 'exited with status 1'."""
    if code is None:
        return "stopped answering"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by signal {-code} ({signal.Signals(-code).name})"
        return f"was killed by signal {-code}"
    return f"exited with status {code}"
