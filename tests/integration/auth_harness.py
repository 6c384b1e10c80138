"""A `servelab serve` subprocess for the auth and TLS tests: every port 0 (the server picks and prints them),
any --host, and a readiness poll that speaks TLS (with a client certificate) when the server does.

The shared :class:`conftest.ServerProcess` polls plain HTTP on ports chosen before the start; these
servers may serve HTTPS, require client certificates or bind 0.0.0.0, so they announce their own ports
(``SERVELAB_PORTS {json}``, the server's own signal) and are polled from 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from conftest import HOST, READY_TIMEOUT_S, ServerProcess

PORTS_LINE = "SERVELAB_PORTS "


@dataclass
class AuthServer(ServerProcess):
    """``AuthServer(repo, log, [flags], host="0.0.0.0", ca=..., client_cert=(cert, key)).start()``."""

    host: str = HOST
    ca: Path | None = None  #: trust this CA and poll readiness over https
    client_cert: tuple[Path, Path] | None = None  #: (certificate, key) for mutual TLS

    @property
    def http_url(self) -> str:
        return f"{'https' if self.ca else 'http'}://{HOST}:{self.http_port}"

    @property
    def management_url(self) -> str:
        return f"{'https' if self.ca else 'http'}://{HOST}:{self.management_port}"

    def ssl_context(self, with_client_cert: bool = True) -> ssl.SSLContext:
        assert self.ca is not None
        context = ssl.create_default_context(cafile=str(self.ca))
        if with_client_cert and self.client_cert is not None:
            context.load_cert_chain(str(self.client_cert[0]), str(self.client_cert[1]))
        return context

    def client(self, **kwargs: object) -> httpx.Client:
        """An httpx client that trusts the server (and presents the client certificate, if any)."""
        verify: ssl.SSLContext | bool = self.ssl_context() if self.ca else True
        return httpx.Client(verify=verify, timeout=10.0, **kwargs)  # type: ignore[arg-type]

    def launch(self) -> AuthServer:
        """Start the process and read its ports; no readiness wait (for servers expected to refuse)."""
        cmd = [
            sys.executable, "-m", "servelab.cli", "serve", str(self.repository),
            "--host", self.host,
            "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--management-port", "0",
            "--exit-timeout-secs", "15",
            *self.extra_args,
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        return self

    def start(self) -> AuthServer:
        self.launch()
        self._read_ports()
        self.wait_ready()
        return self

    def _read_ports(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.log_tail(200_000).splitlines():
                if line.startswith(PORTS_LINE):
                    ports = json.loads(line[len(PORTS_LINE):])
                    self.http_port, self.grpc_port = ports["http"], ports["grpc"]
                    self.metrics_port, self.management_port = ports["metrics"], ports["management"]
                    return
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log_tail()}")
            time.sleep(0.05)  # poll interval, not synchronisation
        self.stop()
        raise RuntimeError(f"server printed no ports within {timeout_s} s:\n{self.log_tail()}")

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        with self.client() as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log_tail()}")
                with contextlib.suppress(httpx.TransportError):
                    if client.get(f"{self.http_url}/v2/health/ready").status_code == 200:
                        return
                time.sleep(0.05)  # poll interval, not synchronisation
        self.stop()
        raise RuntimeError(f"server not ready within {timeout_s} s:\n{self.log_tail()}")


@contextlib.contextmanager
def auth_server(repository: Path, log_dir: Path, name: str, *flags: str, **options: object):  # type: ignore[no-untyped-def]
    """A started :class:`AuthServer` that must exit 0 on SIGTERM."""
    server = AuthServer(repository, log_dir / f"{name}.log", list(flags), **options).start()  # type: ignore[arg-type]
    try:
        yield server
    finally:
        code = server.stop()
    assert code == 0, f"server {name} exited with {code}:\n{server.log_tail()}"
