"""Who may call what, and over which channel: keys, Triton's restricted API groups, TLS certificates."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

__all__ = ["ApiGroup", "AuthSettings", "Restriction", "TlsSettings"]


class ApiGroup(str, Enum):
    """Triton's API groups, the unit of ``--http-restricted-api`` / ``--grpc-restricted-protocol``."""

    HEALTH = "health"
    METADATA = "metadata"
    INFERENCE = "inference"
    SHARED_MEMORY = "shared-memory"
    MODEL_CONFIG = "model-config"
    MODEL_REPOSITORY = "model-repository"
    STATISTICS = "statistics"
    TRACE = "trace"
    LOGGING = "logging"


_HEADER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_VISIBLE_ASCII = re.compile(r"^[\x21-\x7e]+$")


class Restriction(BaseModel):
    """One Triton restricted group: requests to these API groups must carry header ``key`` = ``value``.

    Also accepts Triton's flag syntax as a string: ``"model-repository,statistics:admin-key=secret"``.
    """

    apis: list[ApiGroup] = Field(min_length=1, description="API groups behind this header.")
    key: str = Field(description="Header name (gRPC: sent as metadata 'triton-grpc-protocol-<key>').")
    value: SecretStr = Field(description="Header value a request must carry.")

    @model_validator(mode="before")
    @classmethod
    def _from_flag(cls, data: Any) -> Any:
        if not isinstance(data, str):
            return data
        groups, colon, setting = data.partition(":")
        key, equals, value = setting.partition("=")
        if not (colon and equals and groups and key and value):
            raise ValueError(f"restricted API option format is '<api>[,<api>...]:<key>=<value>'; got {data!r}")
        known = {g.value for g in ApiGroup}
        for name in groups.split(","):
            if name not in known:
                raise ValueError(f"unknown restricted API {name!r}; expected one of {sorted(known)}")
        return {"apis": groups.split(","), "key": key, "value": value}

    @field_validator("key")
    @classmethod
    def _header_name(cls, key: str) -> str:
        if not _HEADER_NAME.match(key):
            raise ValueError(f"restricted API header {key!r} must be letters, digits, '-', '_' or '.'")
        return key.lower()


def _unique_groups(restrictions: list[Restriction], field: str) -> None:
    seen: set[ApiGroup] = set()
    for restriction in restrictions:
        for api in restriction.apis:
            if api in seen:
                raise ValueError(f"{field}: restricted API '{api.value}' can not be specified in multiple config groups")
            seen.add(api)


class AuthSettings(BaseModel):
    """Keys (TorchServe's management / inference tokens) and Triton's restricted API groups.

    Without keys on loopback everything is open. Beyond loopback the management key is required (or
    ``disable_auth``); the server refuses to start otherwise.
    """

    management_key: SecretStr | None = Field(
        None, description="Bearer key for repository control and TorchServe management (also accepted for inference)."
    )
    inference_key: SecretStr | None = Field(
        None, description="Bearer key for inference, metadata, config and statistics; unset = those APIs are open."
    )
    key_file: Path | None = Field(
        None, description="TorchServe-style key_file.json to read; if absent it is generated (mode 0600)."
    )
    disable_auth: bool = Field(False, description="Serve without keys even beyond loopback (TorchServe's --disable-token-auth).")
    http_restricted_api: list[Restriction] = Field(
        default_factory=list, description="Triton's --http-restricted-api groups (header key=value per group)."
    )
    grpc_restricted_protocol: list[Restriction] = Field(
        default_factory=list, description="Triton's --grpc-restricted-protocol groups (metadata key=value per group)."
    )

    @field_validator("management_key", "inference_key")
    @classmethod
    def _visible_ascii(cls, key: SecretStr | None) -> SecretStr | None:
        if key is not None and not _VISIBLE_ASCII.match(key.get_secret_value()):
            raise ValueError("a key must be visible ASCII characters without spaces")
        return key

    @model_validator(mode="after")
    def _consistent(self) -> AuthSettings:
        given = [n for n in ("management_key", "inference_key") if getattr(self, n) is not None]
        if self.key_file is not None and given:
            raise ValueError(f"auth.key_file and auth.{given[0]} are both set: keep the keys in the file or pass them directly")
        if self.disable_auth and (given or self.key_file is not None):
            raise ValueError("auth.disable_auth is set together with a key: drop --disable-auth or the key")
        _unique_groups(self.http_restricted_api, "http_restricted_api")
        _unique_groups(self.grpc_restricted_protocol, "grpc_restricted_protocol")
        return self


class TlsSettings(BaseModel):
    """TLS from certificate files: uvicorn's ssl options on every HTTP port, Triton's flags for gRPC."""

    ssl_certfile: Path | None = Field(None, description="PEM certificate (chain) served on every HTTP port.")
    ssl_keyfile: Path | None = Field(None, description="PEM private key of ssl_certfile.")
    ssl_ca_certs: Path | None = Field(
        None, description="PEM CA bundle; when set, HTTP clients must present a certificate it signed (mutual TLS)."
    )
    grpc_use_ssl: bool = Field(False, description="Serve gRPC over TLS (Triton's --grpc-use-ssl).")
    grpc_server_cert: Path | None = Field(None, description="PEM certificate of the gRPC port.")
    grpc_server_key: Path | None = Field(None, description="PEM private key of grpc_server_cert.")
    grpc_root_cert: Path | None = Field(None, description="PEM CA bundle that signs gRPC client certificates.")
    grpc_use_ssl_mutual: bool = Field(False, description="Require gRPC client certificates (Triton's --grpc-use-ssl-mutual).")

    @model_validator(mode="after")
    def _complete(self) -> TlsSettings:
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("tls.ssl_certfile and tls.ssl_keyfile go together: pass both or neither")
        if self.ssl_ca_certs is not None and self.ssl_certfile is None:
            raise ValueError("tls.ssl_ca_certs (mutual TLS) needs tls.ssl_certfile and tls.ssl_keyfile")
        if self.grpc_use_ssl_mutual and not self.grpc_use_ssl:
            raise ValueError("tls.grpc_use_ssl_mutual needs tls.grpc_use_ssl")
        if self.grpc_use_ssl and (self.grpc_server_cert is None or self.grpc_server_key is None):
            raise ValueError("tls.grpc_use_ssl needs tls.grpc_server_cert and tls.grpc_server_key")
        if self.grpc_use_ssl_mutual and self.grpc_root_cert is None:
            raise ValueError("tls.grpc_use_ssl_mutual needs tls.grpc_root_cert (the CA of the client certificates)")
        for name in ("ssl_certfile", "ssl_keyfile", "ssl_ca_certs", "grpc_server_cert", "grpc_server_key", "grpc_root_cert"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ValueError(f"tls.{name}: no file at {path}")
        return self
