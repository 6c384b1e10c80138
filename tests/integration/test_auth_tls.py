"""TLS on a real server with certificates made here by trustme: tritonclient's SSL options reach HTTP and
gRPC, plain-text clients are refused, and mutual TLS admits a client certificate the CA signed and no
other. Every HTTP port (inference, management, metrics) serves the same certificate."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from harness.clients import simple_inputs
from harness.servers import ServerProcess, running_server

trustme = pytest.importorskip("trustme", reason="TLS tests make their certificates with trustme (dev extra)")


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path  #: a client certificate from a CA the server does not trust
    stranger_key: Path


def _write_cert(cert, folder: Path, name: str) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    chain, key = folder / f"{name}.pem", folder / f"{name}.key"
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    cert.private_key_pem.write_to_path(str(key))
    return chain, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca, stranger_ca = trustme.CA(), trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    server = _write_cert(ca.issue_cert("127.0.0.1", "localhost"), folder, "server")
    client = _write_cert(ca.issue_cert("client.servelab.test"), folder, "client")
    stranger = _write_cert(stranger_ca.issue_cert("stranger.servelab.test"), folder, "stranger")
    return Pki(folder / "ca.pem", *server, *client, *stranger)


def _tls_flags(pki: Pki, mutual: bool) -> list[str]:
    flags = ["--model-control-mode", "explicit", "--load-model", "simple",
             "--ssl-certfile", str(pki.server_cert), "--ssl-keyfile", str(pki.server_key),
             "--grpc-use-ssl", "true", "--grpc-server-cert", str(pki.server_cert),
             "--grpc-server-key", str(pki.server_key)]
    if mutual:
        flags += ["--ssl-ca-certs", str(pki.ca), "--grpc-use-ssl-mutual", "true", "--grpc-root-cert", str(pki.ca)]
    return flags


@pytest.fixture(scope="module")
def tls_server(pki: Pki, test_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    logs = tmp_path_factory.mktemp("logs")
    with running_server(test_repository, logs, "tls", *_tls_flags(pki, mutual=False), ca=pki.ca) as s:
        yield s


@pytest.fixture(scope="module")
def mtls_server(pki: Pki, test_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    logs = tmp_path_factory.mktemp("logs")
    client_cert = (pki.client_cert, pki.client_key)
    with running_server(test_repository, logs, "mtls", *_tls_flags(pki, mutual=True), ca=pki.ca,
                     client_cert=client_cert) as s:
        yield s


def _infer_simple(module: ModuleType, client: Any) -> np.ndarray:
    """``simple``'s OUTPUT0 for INPUT0 = INPUT1 = 0..15, through ``module`` (tritonclient.http or .grpc)."""
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    return client.infer("simple", simple_inputs(module, a, a)).as_numpy("OUTPUT0")


def _assert_grpc_refused(client: grpcclient.InferenceServerClient) -> None:
    """``client`` (which is closed here) cannot reach the server: the TLS handshake never completes."""
    try:
        with pytest.raises(InferenceServerException) as info:
            client.is_server_live(client_timeout=10)
        assert info.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")
    finally:
        client.close()


EXPECTED = 2 * np.arange(16).reshape(1, 16)


def test_tritonclient_http_reaches_https_with_ssl_options(tls_server: ServerProcess, pki: Pki) -> None:
    client = httpclient.InferenceServerClient(tls_server.http_address, ssl=True, ssl_options={"ca_certs": str(pki.ca)})
    try:
        assert client.is_server_ready()
        np.testing.assert_array_equal(_infer_simple(httpclient, client), EXPECTED)
        client.load_model("echo_int8")
        client.unload_model("echo_int8")
    finally:
        client.close()


def test_every_http_port_serves_tls(tls_server: ServerProcess) -> None:
    with tls_server.client() as https:
        assert https.get(f"https://127.0.0.1:{tls_server.management_port}/models").status_code == 200
        assert https.get(f"https://127.0.0.1:{tls_server.metrics_port}/metrics").status_code == 200
        assert https.get(f"{tls_server.http_url}/ping").status_code == 200


def test_plain_http_and_untrusted_clients_are_refused(tls_server: ServerProcess) -> None:
    for port in (tls_server.http_port, tls_server.management_port, tls_server.metrics_port):
        with httpx.Client(timeout=10) as plain, pytest.raises(httpx.TransportError):
            plain.get(f"http://127.0.0.1:{port}/v2/health/ready")
    with httpx.Client(timeout=10) as untrusting, pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        untrusting.get(f"{tls_server.http_url}/v2/health/ready")  # the system store does not know our CA


def test_tritonclient_grpc_reaches_tls_with_root_certificates(tls_server: ServerProcess, pki: Pki) -> None:
    client = grpcclient.InferenceServerClient(tls_server.grpc_address, ssl=True, root_certificates=str(pki.ca))
    try:
        assert client.is_server_ready()
        np.testing.assert_array_equal(_infer_simple(grpcclient, client), EXPECTED)
    finally:
        client.close()
    _assert_grpc_refused(grpcclient.InferenceServerClient(tls_server.grpc_address))


def test_mutual_tls_http_admits_only_a_certificate_the_ca_signed(mtls_server: ServerProcess, pki: Pki) -> None:
    options = {"ca_certs": str(pki.ca), "certfile": str(pki.client_cert), "keyfile": str(pki.client_key)}
    client = httpclient.InferenceServerClient(mtls_server.http_address, ssl=True, ssl_options=options)
    try:
        np.testing.assert_array_equal(_infer_simple(httpclient, client), EXPECTED)
    finally:
        client.close()
    no_cert = mtls_server.ssl_context(with_client_cert=False)
    stranger = mtls_server.ssl_context(with_client_cert=False)
    stranger.load_cert_chain(str(pki.stranger_cert), str(pki.stranger_key))
    for context in (no_cert, stranger):
        with httpx.Client(verify=context, timeout=10) as https, pytest.raises((httpx.TransportError, ssl.SSLError)):
            https.get(f"{mtls_server.http_url}/v2/health/ready")
    with mtls_server.client() as https:  # the management port asks for the certificate too
        assert https.get(f"{mtls_server.management_url}/models").status_code == 200
    with httpx.Client(verify=no_cert, timeout=10) as https, pytest.raises((httpx.TransportError, ssl.SSLError)):
        https.get(f"{mtls_server.management_url}/models")


def test_mutual_tls_grpc_admits_only_a_certificate_the_ca_signed(mtls_server: ServerProcess, pki: Pki) -> None:
    client = grpcclient.InferenceServerClient(
        mtls_server.grpc_address, ssl=True, root_certificates=str(pki.ca),
        private_key=str(pki.client_key), certificate_chain=str(pki.client_cert),
    )
    try:
        np.testing.assert_array_equal(_infer_simple(grpcclient, client), EXPECTED)
    finally:
        client.close()
    for key, chain in ((None, None), (str(pki.stranger_key), str(pki.stranger_cert))):
        _assert_grpc_refused(grpcclient.InferenceServerClient(
            mtls_server.grpc_address, ssl=True, root_certificates=str(pki.ca), private_key=key, certificate_chain=chain
        ))
