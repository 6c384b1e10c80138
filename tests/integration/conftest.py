"""Integration fixtures: the test repository, real `servelab serve` processes on 127.0.0.1 and one client
fixture per protocol on them (the machinery is in tests/harness).

Servers bind port 0 and are ready by their own signal (harness.servers); they are session-scoped where
tests can share them, and every server is stopped with SIGTERM and must exit 0. Tests that change a
shared server (load, unload) put it back as they found it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import httpx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from harness.gates import SocketGate
from harness.repository import build_test_repository
from harness.servers import HOST, MAX_BODY_BYTES, ServerProcess, running_server
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc

__all__ = ["HOST", "MAX_BODY_BYTES", "ServerProcess", "running_server"]


@pytest.fixture(scope="session")
def test_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_test_repository(tmp_path_factory.mktemp("repo") / "models")


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="session")
def server(test_repository: Path, log_dir: Path) -> Iterator[ServerProcess]:
    """Every test model loaded, model control mode 'none' (repository control refused)."""
    with running_server(test_repository, log_dir, "server") as s:
        yield s


@pytest.fixture(scope="session")
def explicit_server(test_repository: Path, log_dir: Path) -> Iterator[ServerProcess]:
    """Model control mode 'explicit' with only ``simple`` loaded: tests load and unload others."""
    with running_server(
        test_repository, log_dir, "explicit", "--model-control-mode", "explicit", "--load-model", "simple"
    ) as s:
        yield s


@pytest.fixture(scope="session")
def server_factory(test_repository: Path, log_dir: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start a private server (e.g. one a test will SIGTERM): ``server_factory(name, *flags)``. The test
    stops it; one still running at the end of the session is stopped then."""
    started: list[ServerProcess] = []

    def start(name: str, *args: str) -> ServerProcess:
        started.append(ServerProcess(test_repository, log_dir / f"{name}.log", list(args)).start())
        return started[-1]

    yield start
    for s in started:
        s.stop()


# ----- one client per protocol, on the shared servers -----
def _client_fixture(module: ModuleType, server_fixture: str, address: str) -> Any:
    """A session fixture: ``module``'s InferenceServerClient on the ``address`` of ``server_fixture``."""

    @pytest.fixture(scope="session")
    def client(request: pytest.FixtureRequest) -> Iterator[Any]:
        with module.InferenceServerClient(getattr(request.getfixturevalue(server_fixture), address)) as c:
            yield c

    client.__doc__ = f"{module.__name__} on :func:`{server_fixture}`."
    return client


http_client = _client_fixture(httpclient, "server", "http_address")
grpc_client = _client_fixture(grpcclient, "server", "grpc_address")
explicit_http_client = _client_fixture(httpclient, "explicit_server", "http_address")
explicit_grpc_client = _client_fixture(grpcclient, "explicit_server", "grpc_address")


@pytest.fixture(scope="session")
def grpc_stub(server: ServerProcess) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    """The generated gRPC stub on :func:`server`, for messages tritonclient would not send."""
    with grpc.insecure_channel(server.grpc_address) as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


@pytest.fixture(scope="session")
def rest(server: ServerProcess) -> Iterator[httpx.Client]:
    """Plain HTTP on :func:`server`'s HTTP port (TF Serving and TorchServe routes, raw OIP bodies)."""
    with httpx.Client(base_url=server.http_url, timeout=10.0) as client:
        yield client


@pytest.fixture
def gate() -> Iterator[SocketGate]:
    """A :class:`harness.gates.SocketGate` for this test's ``gated`` model."""
    with SocketGate() as g:
        yield g
