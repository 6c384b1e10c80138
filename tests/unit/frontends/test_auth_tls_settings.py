"""TLS settings: incomplete or wrong certificate settings stop the server at start with a message naming the
flag and file (checked here without sockets; certificates made by trustme where a real one is needed)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from pydantic import ValidationError

from servelab.config.settings import TlsSettings
from servelab.frontends.auth import AuthSetupError, grpc_server_credentials, http_ssl_options


@pytest.fixture
def pem_files(tmp_path: Path) -> dict[str, Path]:
    trustme = pytest.importorskip("trustme", reason="certificates are made with trustme (dev extra)")
    ca = trustme.CA()
    files: dict[str, Path] = {"ca": tmp_path / "ca.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    for name in ("one", "two"):
        cert = ca.issue_cert(f"{name}.servelab.test")
        files[f"{name}.pem"], files[f"{name}.key"] = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
        cert.cert_chain_pems[0].write_to_path(str(files[f"{name}.pem"]))
        cert.private_key_pem.write_to_path(str(files[f"{name}.key"]))
    return files


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"ssl_certfile": "c"}, "tls.ssl_certfile and tls.ssl_keyfile go together"),
        ({"ssl_ca_certs": "c"}, "tls.ssl_ca_certs (mutual TLS) needs tls.ssl_certfile"),
        ({"grpc_use_ssl": True}, "tls.grpc_use_ssl needs tls.grpc_server_cert and tls.grpc_server_key"),
        ({"grpc_use_ssl_mutual": True}, "tls.grpc_use_ssl_mutual needs tls.grpc_use_ssl"),
        ({"grpc_use_ssl": True, "grpc_use_ssl_mutual": True, "grpc_server_cert": "c", "grpc_server_key": "c"},
         "needs tls.grpc_root_cert"),
    ],
)
def test_incomplete_tls_settings_name_the_missing_field(
    tmp_path: Path, fields: dict[str, object], message: str
) -> None:
    (tmp_path / "c").write_text("x")
    resolved = {k: tmp_path / v if isinstance(v, str) else v for k, v in fields.items()}
    with pytest.raises(ValidationError) as info:
        TlsSettings(**resolved)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_a_missing_certificate_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="tls.ssl_certfile: no file at"):
        TlsSettings(ssl_certfile=tmp_path / "none.pem", ssl_keyfile=tmp_path / "none.key")


def test_no_tls_configured_means_plain_text() -> None:
    assert http_ssl_options(TlsSettings()) == {}
    assert grpc_server_credentials(TlsSettings()) is None


def test_http_options_for_uvicorn_and_mutual_tls(pem_files: dict[str, Path]) -> None:
    tls = TlsSettings(ssl_certfile=pem_files["one.pem"], ssl_keyfile=pem_files["one.key"])
    assert http_ssl_options(tls) == {"ssl_certfile": str(pem_files["one.pem"]), "ssl_keyfile": str(pem_files["one.key"])}
    mutual = http_ssl_options(tls.model_copy(update={"ssl_ca_certs": pem_files["ca"]}))
    assert mutual["ssl_ca_certs"] == str(pem_files["ca"]) and mutual["ssl_cert_reqs"] == ssl.CERT_REQUIRED


def test_a_key_that_does_not_match_its_certificate_stops_the_start(pem_files: dict[str, Path]) -> None:
    with pytest.raises(AuthSetupError, match="cannot load --ssl-certfile"):
        http_ssl_options(TlsSettings(ssl_certfile=pem_files["one.pem"], ssl_keyfile=pem_files["two.key"]))
    grpc_tls = TlsSettings(grpc_use_ssl=True, grpc_server_cert=pem_files["one.pem"], grpc_server_key=pem_files["two.key"])
    with pytest.raises(AuthSetupError, match="--grpc-server-cert .* and --grpc-server-key .* do not load"):
        grpc_server_credentials(grpc_tls)


def test_grpc_credentials_need_pem_files(pem_files: dict[str, Path]) -> None:
    good = TlsSettings(grpc_use_ssl=True, grpc_server_cert=pem_files["one.pem"], grpc_server_key=pem_files["one.key"])
    assert grpc_server_credentials(good) is not None
    mutual = good.model_copy(update={"grpc_use_ssl_mutual": True, "grpc_root_cert": pem_files["ca"]})
    assert grpc_server_credentials(mutual) is not None
    with pytest.raises(AuthSetupError, match="--grpc-root-cert .* is not a PEM file holding a CERTIFICATE"):
        grpc_server_credentials(mutual.model_copy(update={"grpc_root_cert": pem_files["one.key"]}))
