"""Integration fixtures: a test model repository and real `servelab serve` processes on 127.0.0.1.

Ports are found by binding port 0 and passed to the subprocess; readiness is polled on
``/v2/health/ready`` (never a fixed sleep). Servers are session-scoped where tests can share them;
every server is stopped with SIGTERM and must exit 0.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from repo_builder import build_test_repository

HOST = "127.0.0.1"
READY_TIMEOUT_S = 90.0
#: body limit of the shared servers (the oversize test sends more)
MAX_BODY_BYTES = 4_000_000


def free_ports(count: int) -> list[int]:
    """Distinct free ports: bind port 0 on all of them at once, then release."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class ServerProcess:
    """A `servelab serve` subprocess and its URLs."""

    repository: Path
    log_path: Path
    extra_args: list[str] = field(default_factory=list)
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0
    management_port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"http://{HOST}:{self.http_port}"

    @property
    def http_address(self) -> str:
        """host:port, as tritonclient.http wants it."""
        return f"{HOST}:{self.http_port}"

    @property
    def grpc_address(self) -> str:
        return f"{HOST}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{HOST}:{self.metrics_port}"

    @property
    def management_url(self) -> str:
        return f"http://{HOST}:{self.management_port}"

    def start(self) -> ServerProcess:
        self.http_port, self.grpc_port, self.metrics_port, self.management_port = free_ports(4)
        cmd = [
            sys.executable, "-m", "servelab.cli", "serve", str(self.repository),
            "--host", HOST,
            "--http-port", str(self.http_port),
            "--grpc-port", str(self.grpc_port),
            "--metrics-port", str(self.metrics_port),
            "--management-port", str(self.management_port),
            "--max-body-bytes", str(MAX_BODY_BYTES),
            "--exit-timeout-secs", "15",
            *self.extra_args,
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.wait_ready()
        return self

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log_tail()}")
                with contextlib.suppress(httpx.TransportError):
                    if client.get(f"{self.http_url}/v2/health/ready").status_code == 200:
                        return
                time.sleep(0.05)  # poll interval, not synchronisation
        self.stop()
        raise RuntimeError(f"server not ready within {timeout_s} s:\n{self.log_tail()}")

    def terminate(self) -> None:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float = 30.0) -> int:
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise

    def stop(self) -> int | None:
        if self.process is None:
            return None
        self.terminate()
        return self.wait()


@pytest.fixture(scope="session")
def test_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_test_repository(tmp_path_factory.mktemp("repo") / "models")


@contextlib.contextmanager
def running_server(repository: Path, log_dir: Path, name: str, *args: str) -> Iterator[ServerProcess]:
    server = ServerProcess(repository, log_dir / f"{name}.log", list(args)).start()
    try:
        yield server
    finally:
        code = server.stop()
    assert code == 0, f"server {name} exited with {code}:\n{server.log_tail()}"


@pytest.fixture(scope="session")
def server(test_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Every test model loaded, model control mode 'none' (repository control refused)."""
    with running_server(test_repository, tmp_path_factory.mktemp("logs"), "server") as s:
        yield s


@pytest.fixture(scope="session")
def explicit_server(test_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Model control mode 'explicit' with only ``simple`` loaded: tests load and unload others."""
    log_dir = tmp_path_factory.mktemp("logs")
    with running_server(
        test_repository, log_dir, "explicit", "--model-control-mode", "explicit", "--load-model", "simple"
    ) as s:
        yield s


@pytest.fixture(scope="session")
def server_factory(test_repository: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Start a private server (e.g. one a test will SIGTERM): ``server_factory(name, *flags)``."""
    log_dir = tmp_path_factory.mktemp("logs")

    def start(name: str, *args: str) -> ServerProcess:
        return ServerProcess(test_repository, log_dir / f"{name}.log", list(args)).start()

    return start
