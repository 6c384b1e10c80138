"""pydantic settings: one model per concern, combined into :class:`ServerSettings`."""

from __future__ import annotations

import json
import os
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ControlMode(str, Enum):
    """Triton's model control modes."""

    NONE = "none"  #: load every model at start-up; the repository API refuses load/unload
    EXPLICIT = "explicit"  #: load only --load-model names; load/unload through the API
    POLL = "poll"  #: load every model, then pick up new versions and changed configs while running


class LimitSettings(BaseModel):
    """Limits checked before memory is allocated for a request."""

    max_body_bytes: int = Field(64 * 1024 * 1024, gt=0, description="Largest request body accepted (413 above).")
    max_tensor_elements: int = Field(
        64 * 1024 * 1024, gt=0, description="Largest element count of any one input tensor."
    )
    request_timeout_s: float = Field(60.0, gt=0, description="Time a request may take end to end (server side).")


class WorkerSettings(BaseModel):
    """Worker processes (python models, and any model with ``instance_mode: process``)."""

    kill_timeout_s: float = Field(
        10.0, ge=0, description="How long past the request deadline a worker still busy with it lives "
        "before it is killed and replaced."
    )
    restart_backoff_s: float = Field(0.25, gt=0, description="Delay before restarting a worker that died; doubles per failure.")
    restart_backoff_max_s: float = Field(30.0, gt=0, description="Longest delay between restarts of a failing worker.")
    start_timeout_s: float = Field(120.0, gt=0, description="Time a worker may take to start and load its model.")
    max_workers_per_model: int = Field(
        8, ge=1, description="Most worker processes one model version may have (instance_group count, TorchServe scale)."
    )
    arena_bytes: int = Field(
        8 * 1024 * 1024, ge=1024 * 1024,
        description="Shared memory pre-allocated per worker and direction for tensors (grows when a request needs more).",
    )

    @model_validator(mode="after")
    def _backoff_order(self) -> WorkerSettings:
        if self.restart_backoff_max_s < self.restart_backoff_s:
            raise ValueError(
                f"restart_backoff_max_s ({self.restart_backoff_max_s}) must be >= restart_backoff_s ({self.restart_backoff_s})"
            )
        return self


class ServerSettings(BaseSettings):
    """Everything `servelab serve` needs. Flags override SERVELAB_* variables override the settings file."""

    model_config = SettingsConfigDict(env_prefix="SERVELAB_", env_nested_delimiter="__", extra="forbid")

    model_repository: list[Path] = Field(default_factory=list, description="One or more repository folders.")
    host: str = Field("127.0.0.1", description="Address to bind; 0.0.0.0 to listen on every interface.")
    http_port: int = Field(8000, ge=0, le=65535, description="OIP REST, TF Serving and TorchServe inference.")
    grpc_port: int = Field(8001, ge=0, le=65535, description="OIP gRPC (inference.GRPCInferenceService).")
    metrics_port: int = Field(8002, ge=0, le=65535, description="Prometheus /metrics.")
    management_port: int = Field(8081, ge=0, le=65535, description="TorchServe-compatible management API.")
    model_control_mode: ControlMode = Field(ControlMode.NONE, description="none | explicit | poll.")
    load_models: list[str] = Field(default_factory=list, description="Models to load at start ('*' for all).")
    repository_poll_secs: float = Field(15.0, gt=0, description="Poll interval in poll mode.")
    exit_timeout_s: float = Field(30.0, ge=0, description="How long SIGTERM waits for in-flight requests.")
    strict_readiness: bool = Field(True, description="Ready only when every start-up model is READY.")
    limits: LimitSettings = Field(default_factory=LimitSettings)
    workers: WorkerSettings = Field(default_factory=WorkerSettings)

    @model_validator(mode="after")
    def _ports_distinct(self) -> ServerSettings:
        ports = {
            "http_port": self.http_port,
            "grpc_port": self.grpc_port,
            "metrics_port": self.metrics_port,
            "management_port": self.management_port,
        }
        used = [p for p in ports.values() if p]
        if len(used) != len(set(used)):
            raise ValueError(f"http_port, grpc_port, metrics_port and management_port must differ (got {ports})")
        return self

    @classmethod
    def from_file(cls, path: Path | None = None, **overrides: Any) -> ServerSettings:
        """Read a JSON settings file (if given), then apply explicit overrides (flags)."""
        data: dict[str, Any] = {}
        if path is not None:
            try:
                data = json.loads(Path(path).read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise ValueError(f"settings file {path}: {exc}") from exc
        data.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**data)


def default_threads() -> int:
    """Cores this process may use (respects CPU affinity)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)
