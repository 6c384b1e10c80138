"""A server as a child process of a script that measures it: start it, wait until its readiness URL answers
200, stop it with SIGTERM (SIGKILL after a grace period) and keep its exit code.

:func:`serve_argv` is the one ``python -m servelab.cli serve`` command line of the bench side (every port on
127.0.0.1), :func:`running` runs any server command (a baseline too), :func:`servelab_serve` the two
together. Blocking and standard library only, like :mod:`servelab.bench.net`; the benchmarks and
:class:`servelab.bench.peers.servelab_target.ServelabPeer` use them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servelab.bench.net import HOST, free_ports, http_status, wait_until

__all__ = ["ServePorts", "ServeProcess", "running", "serve_argv", "servelab_serve", "stop_process"]


@dataclass(frozen=True, slots=True)
class ServePorts:
    """The four ports of one ``servelab serve`` on 127.0.0.1."""

    http: int
    grpc: int
    metrics: int
    management: int

    @classmethod
    def free(cls, http: int | None = None) -> ServePorts:
        """Ports that were free a moment ago (``http`` as given, when a caller has chosen it)."""
        if http is None:
            return cls(*free_ports(4))
        return cls(http, *free_ports(3))

    @property
    def http_url(self) -> str:
        return f"http://{HOST}:{self.http}"

    @property
    def grpc_address(self) -> str:
        return f"{HOST}:{self.grpc}"

    @property
    def metrics_url(self) -> str:
        return f"http://{HOST}:{self.metrics}"


def serve_argv(repository: Path, ports: ServePorts, *flags: str) -> list[str]:
    """``python -m servelab.cli serve REPOSITORY`` on 127.0.0.1 and ``ports``, then ``flags``."""
    return [
        sys.executable, "-m", "servelab.cli", "serve", str(repository), "--host", HOST,
        "--http-port", str(ports.http), "--grpc-port", str(ports.grpc), "--metrics-port", str(ports.metrics),
        "--management-port", str(ports.management), *flags,
    ]  # fmt: skip


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> int:
    """SIGTERM (a graceful stop) if it still runs, then its exit code; SIGKILL after ``timeout_s``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


@dataclass
class ServeProcess:
    """A started server: its process, and its exit code once :func:`running` has stopped it."""

    proc: subprocess.Popen[bytes]
    ports: ServePorts | None = None
    log: Path | None = None
    exit_code: int | None = field(default=None, init=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exited(self) -> str | None:
        """None while it runs; otherwise its exit code and the end of its log (when it has one)."""
        if self.proc.poll() is None:
            return None
        tail = f": {self.log.read_text(errors='replace')[-2000:]}" if self.log is not None else ""
        return f"exit code {self.proc.returncode}{tail}"


@contextlib.contextmanager
def running(
    argv: Sequence[str],
    ready_url: str,
    *,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    ready_timeout_s: float = 120.0,
    stop_timeout_s: float = 30.0,
    ports: ServePorts | None = None,
) -> Iterator[ServeProcess]:
    """Run ``argv`` (``env`` added to this process's environment; its output to ``log``, else discarded)
    and yield once ``ready_url`` answers 200; stopped on exit (:func:`stop_process`), its code kept."""
    full_env = {**os.environ, **(env or {})}
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(log.open("wb")) if log is not None else subprocess.DEVNULL
        proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, env=full_env)
    server = ServeProcess(proc, ports, log)
    try:
        wait_until(lambda: http_status(ready_url)[0] == 200, ready_timeout_s, ready_url, server.exited)
        yield server
    finally:
        server.exit_code = stop_process(proc, stop_timeout_s)


@contextlib.contextmanager
def servelab_serve(
    repository: Path,
    *flags: str,
    http_port: int | None = None,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    ready_timeout_s: float = 120.0,
    stop_timeout_s: float = 30.0,
) -> Iterator[ServeProcess]:
    """``servelab serve REPOSITORY FLAGS`` on free ports (HTTP on ``http_port`` when given), ready once
    ``/v2/health/ready`` answers 200; see :func:`running` for the rest."""
    ports = ServePorts.free(http_port)
    argv = serve_argv(repository, ports, *flags)
    with running(argv, f"{ports.http_url}/v2/health/ready", env=env, log=log, ready_timeout_s=ready_timeout_s,
                 stop_timeout_s=stop_timeout_s, ports=ports) as server:
        yield server
