"""Serving another server's models in place of a repository: a TF Serving model config, a TorchServe model store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator

__all__ = ["TfServingSettings", "TorchServeSettings"]


class TfServingSettings(BaseModel):
    """Serving a TF Serving model config instead of a model repository, with TF Serving's flags."""

    config_file: Path | None = Field(
        None, description="TF Serving's --model_config_file (ModelServerConfig text format); replaces model_repository."
    )
    config_poll_s: float = Field(
        0.0, ge=0, description="--model_config_file_poll_wait_seconds: re-read the config file this often; 0 = never."
    )
    file_system_poll_s: float = Field(
        1.0, ge=0, description="--file_system_poll_wait_seconds: look for new version folders this often; 0 = at start only."
    )
    enable_batching: bool = Field(
        False, description="--enable_batching: batch every batching signature (TF Serving's defaults unless a file is given)."
    )
    batching_parameters_file: Path | None = Field(
        None, description="--batching_parameters_file (BatchingParameters text format); implies enable_batching."
    )

    @model_validator(mode="after")
    def _files(self) -> TfServingSettings:
        for name in ("config_file", "batching_parameters_file"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ValueError(f"tfserving.{name}: no file at {path}")
        if self.config_file is None and (self.config_poll_s or self.enable_batching or self.batching_parameters_file):
            raise ValueError("tfserving settings (poll, batching) need tfserving.config_file (--tfserving-config)")
        return self

    @property
    def poll_tick_s(self) -> float:
        """How often the registry looks at the config: the shorter positive poll interval, else 1 s."""
        positive = [s for s in (self.config_poll_s, self.file_system_poll_s) if s > 0]
        return min(positive) if positive else 1.0


class TorchServeSettings(BaseModel):
    """Serving a TorchServe model store instead of a model repository, with TorchServe's keys
    (``servelab serve --torchserve-config config.properties`` or ``--model-store``)."""

    config_file: Path | None = Field(None, description="The config.properties these settings were read from (for messages).")
    model_store: Path | None = Field(
        None, description="TorchServe's model_store / --model-store: .mar, .tar.gz and model folders; replaces model_repository."
    )
    load_models: list[str] = Field(
        default_factory=list, description="load_models / --models: 'all', or [name=]archive entries to load at start."
    )
    models: dict[str, dict[str, dict[str, Any]]] = Field(
        default_factory=dict, description="config.properties models={...}: model -> version -> minWorkers, batchSize, ..."
    )
    default_workers: int | None = Field(
        None, ge=1, description="default_workers_per_model; unset = the logical processors, as in TorchServe."
    )
    default_response_timeout_s: int = Field(120, ge=1, description="default_response_timeout: a model's responseTimeout when it sets none.")
    enable_model_api: bool = Field(
        False, description="enable_model_api / --enable-model-api: allow register and unregister (TorchServe 0.12: off)."
    )
    grpc_inference_port: int | None = Field(
        None, ge=0, le=65535, description="TorchServe's gRPC inference API; unset = 7070 with a model store, else not served."
    )
    grpc_management_port: int | None = Field(
        None, ge=0, le=65535, description="TorchServe's gRPC management API; unset = 7071 with a model store, else not served."
    )
    max_unpacked_bytes: int = Field(16 * 1024**3, gt=0, description="Largest total size one archive may unpack to.")
    service_envelope: str | None = Field(
        None, min_length=1, description="service_envelope: the request envelope of every handler ('json', 'kserve', 'kservev2')."
    )

    @model_validator(mode="after")
    def _store(self) -> TorchServeSettings:
        if self.model_store is not None and not Path(self.model_store).is_dir():
            raise ValueError(f"torchserve.model_store: no folder at {self.model_store}")
        if self.model_store is None and self.load_models:
            raise ValueError("torchserve.load_models (--models) needs torchserve.model_store (--model-store)")
        return self

    def grpc_ports(self) -> dict[str, int]:
        """The TorchServe gRPC ports to open: given ones, else TorchServe's defaults when a store is served."""
        serving = self.model_store is not None
        ports = {"torchserve_grpc_inference": self.grpc_inference_port, "torchserve_grpc_management": self.grpc_management_port}
        defaults = {"torchserve_grpc_inference": 7070, "torchserve_grpc_management": 7071}
        return {k: v if v is not None else defaults[k] for k, v in ports.items() if v is not None or serving}
