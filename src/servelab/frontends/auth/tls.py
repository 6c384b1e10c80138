"""TLS from certificate files: uvicorn's ssl options for every HTTP port, gRPC server credentials.

Both are loaded once at start, so a wrong file or a key that does not match its certificate stops the
server with a message naming the file, before any port is bound. HTTP: ``ssl_ca_certs`` turns on mutual
TLS (clients must present a certificate that CA signed). gRPC follows Triton's flags: ``grpc_use_ssl``
with a server certificate and key, ``grpc_use_ssl_mutual`` with ``grpc_root_cert`` to require client
certificates.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import grpc

from servelab.config.settings import TlsSettings
from servelab.frontends.auth.keys import AuthSetupError

__all__ = ["grpc_server_credentials", "grpc_ssl_context", "http_ssl_options"]


def http_ssl_options(tls: TlsSettings) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.Config`` (empty: plain HTTP), checked by loading them once."""
    if tls.ssl_certfile is None or tls.ssl_keyfile is None:
        return {}
    options: dict[str, Any] = {"ssl_certfile": str(tls.ssl_certfile), "ssl_keyfile": str(tls.ssl_keyfile)}
    if tls.ssl_ca_certs is not None:
        options |= {"ssl_ca_certs": str(tls.ssl_ca_certs), "ssl_cert_reqs": ssl.CERT_REQUIRED}
    _check_http(tls)
    return options


def _check_http(tls: TlsSettings) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(str(tls.ssl_certfile), str(tls.ssl_keyfile))
    except (OSError, ssl.SSLError) as exc:
        raise AuthSetupError(
            f"tls: cannot load --ssl-certfile {tls.ssl_certfile} with --ssl-keyfile {tls.ssl_keyfile}: {exc}"
        ) from None
    if tls.ssl_ca_certs is not None:
        try:
            context.load_verify_locations(str(tls.ssl_ca_certs))
        except (OSError, ssl.SSLError) as exc:
            raise AuthSetupError(f"tls: cannot load --ssl-ca-certs {tls.ssl_ca_certs}: {exc}") from None


def grpc_server_credentials(tls: TlsSettings) -> grpc.ServerCredentials | None:
    """Credentials for the gRPC port, or ``None`` for plain text (``grpc_use_ssl`` off)."""
    if not tls.grpc_use_ssl:
        return None
    assert tls.grpc_server_cert is not None and tls.grpc_server_key is not None  # TlsSettings checks it
    key = _pem(tls.grpc_server_key, "--grpc-server-key", b"PRIVATE KEY")
    chain = _pem(tls.grpc_server_cert, "--grpc-server-cert", b"CERTIFICATE")
    root = None
    if tls.grpc_use_ssl_mutual:
        assert tls.grpc_root_cert is not None
        root = _pem(tls.grpc_root_cert, "--grpc-root-cert", b"CERTIFICATE")
    _check_pair(tls.grpc_server_cert, tls.grpc_server_key)
    return grpc.ssl_server_credentials([(key, chain)], root_certificates=root, require_client_auth=root is not None)


def grpc_ssl_context(tls: TlsSettings) -> ssl.SSLContext | None:
    """The same gRPC TLS as an ``ssl.SSLContext`` for the HTTP/2 door (ALPN ``h2``), or ``None`` for plain text."""
    if grpc_server_credentials(tls) is None:  # checks every file as for grpcio
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(tls.grpc_server_cert), str(tls.grpc_server_key))
    if tls.grpc_use_ssl_mutual:
        context.load_verify_locations(str(tls.grpc_root_cert))
        context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(["h2"])  # gRPC clients insist on it
    return context


def _pem(path: Path, flag: str, kind: bytes) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise AuthSetupError(f"tls: cannot read {flag} {path}: {exc.strerror}") from None
    if b"-----BEGIN " not in data or kind not in data:
        raise AuthSetupError(f"tls: {flag} {path} is not a PEM file holding a {kind.decode()}")
    return data


def _check_pair(cert: Path, key: Path) -> None:
    """grpc only reports a mismatched key when a client connects; find out at start instead."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as exc:
        raise AuthSetupError(f"tls: --grpc-server-cert {cert} and --grpc-server-key {key} do not load: {exc}") from None
