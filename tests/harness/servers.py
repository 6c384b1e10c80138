"""A real ``servelab serve`` subprocess on 127.0.0.1, every port 0, ready by the server's own signal.

The server binds port 0 for HTTP, gRPC, metrics and management and prints the bound ports as
``SERVELAB_PORTS {json}``; once its start-up models are loaded it prints ``SERVELAB_READY {json}``. A
reader thread copies the process output to the log file and hands those two lines to :meth:`start`,
which waits on them (no free-port race, no polling, no sleep) and then checks ``/v2/health/ready``
once. Every server is stopped with SIGTERM and is expected to exit 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

__all__ = [
    "HOST", "MAX_BODY_BYTES", "READY_TIMEOUT_S", "ServerProcess", "running_server", "server_fixture", "stopping",
]  # fmt: skip

HOST = "127.0.0.1"
READY_TIMEOUT_S = 90.0
#: body limit of the test servers (the oversize tests send more)
MAX_BODY_BYTES = 4_000_000
PORTS_LINE = "SERVELAB_PORTS "
READY_LINE = "SERVELAB_READY "


class _Address:
    """``127.0.0.1:<port>`` of one of a server's ports, read from the port field named."""

    def __init__(self, port_field: str) -> None:
        self.port_field = port_field

    def __get__(self, server: object, owner: type | None = None) -> str:
        return f"{HOST}:{getattr(server, self.port_field)}"


@dataclass
class ServerProcess:
    """A ``servelab serve`` subprocess and its URLs (the ports are known once :meth:`start` returns)."""

    repository: Path
    log_path: Path
    extra_args: list[str] = field(default_factory=list)
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0
    management_port: int = 0
    process: subprocess.Popen[bytes] | None = None
    #: the address the server binds (it is always reached through 127.0.0.1)
    host: str = HOST
    #: a CA to trust: the server serves HTTPS (its URLs say https) and readiness is checked over TLS
    ca: Path | None = None
    #: (certificate, key) presented to a server that asks for client certificates (mutual TLS)
    client_cert: tuple[Path, Path] | None = None
    #: extra environment variables of the server process
    env: dict[str, str] = field(default_factory=dict)
    _signals: queue.Queue[tuple[str, Any]] = field(default_factory=queue.Queue, repr=False)
    _reader: threading.Thread | None = field(default=None, repr=False)

    #: the addresses of the bound ports
    http_address = _Address("http_port")  # host:port, as tritonclient.http wants it
    grpc_address = _Address("grpc_port")

    @property
    def scheme(self) -> str:
        return "https" if self.ca else "http"

    @property
    def http_url(self) -> str:
        return f"{self.scheme}://{HOST}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.scheme}://{HOST}:{self.metrics_port}"

    @property
    def management_url(self) -> str:
        return f"{self.scheme}://{HOST}:{self.management_port}"

    def ssl_context(self, with_client_cert: bool = True) -> ssl.SSLContext:
        """A client context trusting :attr:`ca` (presenting :attr:`client_cert` unless told not to)."""
        assert self.ca is not None, "ssl_context() is for servers started with ca="
        context = ssl.create_default_context(cafile=str(self.ca))
        if with_client_cert and self.client_cert is not None:
            context.load_cert_chain(str(self.client_cert[0]), str(self.client_cert[1]))
        return context

    def client(self, **kwargs: Any) -> httpx.Client:
        """An httpx client for this server (trusting its CA and presenting the client certificate, if any)."""
        verify: ssl.SSLContext | bool = self.ssl_context() if self.ca else True
        return httpx.Client(verify=verify, timeout=10.0, **kwargs)

    # ----- start -----
    def start(self, timeout_s: float = READY_TIMEOUT_S) -> ServerProcess:
        """Start the process and return once it says it is ready (RuntimeError with its log if not)."""
        self.launch()
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.stop()
            raise
        return self

    def target_args(self) -> list[str]:
        """What the server serves: the repository folder (subclasses serve other sources)."""
        return [str(self.repository)]

    def launch(self) -> ServerProcess:
        """Start the process without waiting for it (for servers a test expects to refuse to start)."""
        cmd = [
            sys.executable, "-m", "servelab.cli", "serve", *self.target_args(), "--host", self.host,
            "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--management-port", "0",
            "--max-body-bytes", str(MAX_BODY_BYTES), "--exit-timeout-secs", "15", *self.extra_args,
        ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1", **self.env}
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        self._reader = threading.Thread(target=self._copy_output, name=f"log-{self.log_path.stem}", daemon=True)
        self._reader.start()
        return self

    def _copy_output(self) -> None:
        """Reader thread: every output line to the log; the ports and ready lines to :meth:`start`."""
        assert self.process is not None and self.process.stdout is not None
        with self.log_path.open("wb") as log:
            for line in self.process.stdout:
                log.write(line)
                log.flush()
                text = line.decode(errors="replace")
                for prefix in (PORTS_LINE, READY_LINE):
                    if text.startswith(prefix):
                        self._signals.put((prefix, json.loads(text[len(prefix) :])))
        self._signals.put(("", None))  # end of output: the process has gone

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                kind, value = self._signals.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"server not ready within {timeout_s} s:\n{self.log_tail()}") from None
            if kind == PORTS_LINE:
                self.http_port, self.grpc_port = value["http"], value.get("grpc", 0)
                self.metrics_port, self.management_port = value["metrics"], value["management"]
            elif kind == READY_LINE:
                break
            else:
                code = self.process.wait() if self.process is not None else None
                raise RuntimeError(f"server exited with {code} before it was ready:\n{self.log_tail()}")
        if not value["ready"]:
            raise RuntimeError(f"server started but is not ready (a start-up model failed?):\n{self.log_tail()}")
        with self.client() as client:
            status = client.get(f"{self.http_url}/v2/health/ready").status_code
        if status != 200:
            raise RuntimeError(f"server said ready, /v2/health/ready says {status}:\n{self.log_tail()}")

    # ----- observe and stop -----
    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def terminate(self) -> None:
        """SIGTERM (a graceful stop) if the process still runs."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float = 30.0) -> int:
        """The exit code; a process still running after ``timeout_s`` is killed (and TimeoutExpired raised)."""
        assert self.process is not None
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        if self._reader is not None:
            self._reader.join(timeout=10)
        return code

    def stop(self) -> int | None:
        """SIGTERM and wait; the exit code (None if never started)."""
        if self.process is None:
            return None
        self.terminate()
        return self.wait()


@contextlib.contextmanager
def stopping(server: ServerProcess) -> Iterator[ServerProcess]:
    """Yield the started ``server`` (any ServerProcess, e.g. one of ``server_factory``'s or a subclass);
    on exit it is stopped with SIGTERM and must exit 0 (checked only when the block itself succeeded)."""
    try:
        yield server
    finally:
        code = server.stop()
    assert code == 0, f"server {server.log_path.stem} exited with {code}:\n{server.log_tail()}"


@contextlib.contextmanager
def running_server(
    repository: Path, log_dir: Path, name: str, *args: str, **options: Any
) -> Iterator[ServerProcess]:
    """A started server with ``args`` as extra ``servelab serve`` flags and ``options`` as ServerProcess
    fields (``host``, ``ca``, ``client_cert``, ``env``); stopped on exit, which must be 0."""
    with stopping(ServerProcess(repository, log_dir / f"{name}.log", list(args), **options).start()) as server:
        yield server


def server_fixture(repository_fixture: str, name: str, *args: str, doc: str = "") -> Any:
    """A module-scoped pytest fixture: :func:`running_server` of the folder the fixture named
    ``repository_fixture`` returns, with ``args`` as extra flags and its log in a fresh temporary folder."""

    @pytest.fixture(scope="module")
    def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
        repository = request.getfixturevalue(repository_fixture)
        with running_server(repository, tmp_path_factory.mktemp(f"{name}-logs"), name, *args) as server:
            yield server

    served.__doc__ = doc or f"``servelab serve`` of :func:`{repository_fixture}` ({name})."
    return served
