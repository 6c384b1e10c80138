"""pydantic settings: one model per concern, combined into :class:`ServerSettings`.

Each concern's model lives in its own module beside this one (limits, security, workers, deploy,
stores, routing); they are re-exported here, so ``from servelab.config.settings import X`` is the one
place every caller reads settings from.
"""

from __future__ import annotations

import functools
import json
import os
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict

from servelab.config.deploy import (
    AutoscalingSettings,
    DeploySettings,
    KubernetesSettings,
    ModelDeploySettings,
)
from servelab.config.limits import LimitSettings
from servelab.config.routing import RoutingSettings
from servelab.config.security import ApiGroup, AuthSettings, Restriction, TlsSettings
from servelab.config.stores import TfServingSettings, TorchServeSettings
from servelab.config.workers import WorkerSettings

__all__ = [
    "ApiGroup",
    "AuthSettings",
    "AutoscalingSettings",
    "ControlMode",
    "DeploySettings",
    "KubernetesSettings",
    "LimitSettings",
    "ModelDeploySettings",
    "Restriction",
    "RoutingSettings",
    "ServerSettings",
    "TfServingSettings",
    "TlsSettings",
    "TorchServeSettings",
    "WorkerSettings",
    "default_threads",
]


class ControlMode(str, Enum):
    """Triton's model control modes."""

    NONE = "none"  #: load every model at start-up; the repository API refuses load/unload
    EXPLICIT = "explicit"  #: load only --load-model names; load/unload through the API
    POLL = "poll"  #: load every model, then pick up new versions and changed configs while running


class ServerSettings(BaseSettings):
    """Everything `servelab serve` needs. Flags override SERVELAB_* variables, which override the settings
    file, which overrides the defaults (see :meth:`from_file`)."""

    model_config = SettingsConfigDict(env_prefix="SERVELAB_", env_nested_delimiter="__", extra="forbid")

    model_repository: list[Path] = Field(default_factory=list, description="One or more repository folders.")
    host: str = Field("127.0.0.1", description="Address to bind; 0.0.0.0 to listen on every interface.")
    http_port: int = Field(8000, ge=0, le=65535, description="OIP REST, TF Serving and TorchServe inference.")
    grpc_port: int = Field(8001, ge=0, le=65535, description="OIP gRPC (inference.GRPCInferenceService).")
    grpc_door: Literal["grpcio", "h2"] = Field(
        "h2",
        description="What serves the gRPC port: h2, the lean HTTP/2 door on the event loop (frontends/grpc/h2: every "
        "method, streaming and TLS included, about 2x the calls per second of grpcio), or grpcio (grpc.aio), the "
        "fallback. Both take gzip and deflate requests.",
    )
    metrics_port: int = Field(8002, ge=0, le=65535, description="Prometheus /metrics.")
    management_port: int = Field(8081, ge=0, le=65535, description="TorchServe-compatible management API.")
    model_control_mode: ControlMode = Field(ControlMode.NONE, description="none | explicit | poll.")
    load_models: list[str] = Field(default_factory=list, description="Models to load at start ('*' for all).")
    repository_poll_secs: float = Field(15.0, gt=0, description="Poll interval in poll mode.")
    processes: int = Field(
        1, ge=1, le=64,
        description="Server processes sharing the ports (SO_REUSEPORT), each with its own models; statistics and "
        "model control stay one server's (frontends/process_group.py). More than 1 uses more cores for small requests.",
    )
    exit_timeout_s: float = Field(30.0, ge=0, description="How long SIGTERM waits for in-flight requests.")
    strict_readiness: bool = Field(True, description="Ready only when every start-up model is READY.")
    server_name: str = Field(
        "servelab", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$",
        description="The name server metadata gives (GET /v2, gRPC ServerMetadata); 'triton' for clients that check "
        "for it, as Triton's own health/metadata examples do.",
    )
    auto_complete_config: bool = Field(
        True,
        description="Complete configs from the model files (inputs, outputs, max_batch_size); Triton's "
        "--disable-auto-complete-config or --strict-model-config=true turn it off (defaults are still filled).",
    )
    allow_custom_backends: bool = Field(
        False,
        description="Allow `backend: \"module:Class\"` in model configs, which imports that module (runs its "
        "code); off by default, since a load request's config override could name any module.",
    )
    limits: LimitSettings = Field(default_factory=LimitSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings, description="Keys and restricted API groups.")
    tls: TlsSettings = Field(default_factory=TlsSettings, description="TLS certificates for HTTP and gRPC.")
    workers: WorkerSettings = Field(default_factory=WorkerSettings, description="Worker processes: deadlines, restarts, caps.")
    deploy: DeploySettings = Field(default_factory=DeploySettings, description="servelab deploy: Ray Serve and Kubernetes.")
    tfserving: TfServingSettings = Field(
        default_factory=TfServingSettings, description="Serve a TF Serving model config (TF Serving's flags)."
    )
    routing: RoutingSettings = Field(
        default_factory=RoutingSettings, description="Version routing: rollout state file, gate evaluation, shadow budget."
    )
    torchserve: TorchServeSettings = Field(
        default_factory=TorchServeSettings, description="Serve a TorchServe model store (config.properties keys)."
    )

    @model_validator(mode="after")
    def _ports_distinct(self) -> ServerSettings:
        ports = {
            "http_port": self.http_port,
            "grpc_port": self.grpc_port,
            "metrics_port": self.metrics_port,
            "management_port": self.management_port,
        }
        ports.update(self.torchserve.grpc_ports())
        used = [p for p in ports.values() if p]
        if len(used) != len(set(used)):
            names = list(ports)
            raise ValueError(f"{', '.join(names[:-1])} and {names[-1]} must differ (got {ports})")
        if self.tfserving.config_file is not None and self.model_repository:
            raise ValueError("model_repository and tfserving.config_file are both set: serve a model repository "
                             "or a TF Serving model config (servelab import tfserving turns one into the other)")
        sources = [n for n, given in (("model_repository", bool(self.model_repository)),
                                      ("tfserving.config_file", self.tfserving.config_file is not None),
                                      ("torchserve.model_store", self.torchserve.model_store is not None)) if given]
        if len(sources) > 1:
            raise ValueError(f"{' and '.join(sources)} are both set: serve one of a model repository, a TF Serving "
                             "config or a TorchServe model store (servelab import turns the others into a repository)")
        return self

    @classmethod
    def from_file(cls, path: Path | None = None, **overrides: Any) -> ServerSettings:
        """Settings from, first match wins: ``overrides`` (flags; None is "not given"), SERVELAB_*
        environment variables, the JSON file at ``path`` (if given), the defaults.

        Nested models merge field by field: ``SERVELAB_LIMITS__MAX_BODY_BYTES`` replaces that one field
        of the file's ``limits`` and keeps the others.
        """
        layers = [
            _read_json(path) if path is not None else {},
            EnvSettingsSource(cls)(),
            {k: v for k, v in overrides.items() if v is not None},
        ]
        return cls(**functools.reduce(_merged, layers))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"settings file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"settings file {path}: expected a JSON object of settings, got {type(data).__name__}")
    return data


def _merged(low: dict[str, Any], high: dict[str, Any]) -> dict[str, Any]:
    """``low`` updated with ``high``, nested dicts merged key by key instead of replaced."""
    out = dict(low)
    for key, value in high.items():
        below = out.get(key)
        out[key] = _merged(below, value) if isinstance(below, dict) and isinstance(value, dict) else value
    return out


def default_threads() -> int:
    """Cores this process may use (respects CPU affinity)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)
