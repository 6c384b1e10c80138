"""pydantic settings: one model per concern, combined into :class:`ServerSettings`."""

from __future__ import annotations

import functools
import json
import os
import re
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict


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
    max_tensor_rank: int = Field(
        32, gt=0, le=64, description="Most dimensions a request tensor may have (numpy's own ceiling is 64)."
    )
    offload_decode_bytes: int = Field(
        1024 * 1024, ge=0, description="Request bodies (and responses) above this size are decoded (encoded) "
        "in a worker thread so that the event loop keeps serving small requests; 0 offloads every one."
    )
    http_header_timeout_s: float = Field(
        10.0, gt=0, description="Time a client has to send a request's headers, from the connection or the "
        "request's first byte; slower clients are answered 408 and disconnected (slowloris)."
    )
    http_keep_alive_timeout_s: int = Field(30, gt=0, description="Idle seconds before a keep-alive HTTP "
                                           "connection is closed.")
    http_max_header_bytes: int = Field(
        64 * 1024, ge=1024, description="Largest request line plus headers; larger ones are answered 431."
    )
    http_max_connections: int = Field(
        1000, gt=0, description="Open connections per HTTP port; requests past it are answered 503. Lowered at "
        "start to fit the process's open-file limit (RLIMIT_NOFILE)."
    )
    grpc_max_concurrent_streams: int = Field(
        1000, gt=0, description="Concurrent gRPC calls per client connection (grpc.max_concurrent_streams); "
        "further calls wait in the client."
    )
    grpc_max_error_bytes: int = Field(
        2048, ge=64, le=2600, description="Longest gRPC error message (UTF-8 bytes), cut with a marker: "
        "percent-encoded it stays under the 8 KiB of trailing metadata a stock gRPC client accepts."
    )


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


class AutoscalingSettings(BaseModel):
    """Ray Serve autoscaling of one model's replicas (its ``autoscaling_config``)."""

    min_replicas: int = Field(1, ge=0, description="Fewest replicas (0 lets an idle model scale to none).")
    max_replicas: int = Field(2, ge=1, description="Most replicas.")
    target_ongoing_requests: float | None = Field(
        None, gt=0, description="Requests in flight per replica that autoscaling aims at; unset = one full "
        "batch per instance (max_batch_size x instances, at least 1).",
    )

    @model_validator(mode="after")
    def _ordered(self) -> AutoscalingSettings:
        if self.max_replicas < self.min_replicas:
            raise ValueError(
                f"autoscaling.max_replicas ({self.max_replicas}) is below autoscaling.min_replicas ({self.min_replicas})"
            )
        return self


class ModelDeploySettings(BaseModel):
    """How one model is spread over machines; unset fields come from its config.pbtxt."""

    num_replicas: int | None = Field(None, ge=1, description="Fixed replica count (ignored when autoscaling is set).")
    autoscaling: AutoscalingSettings | None = Field(None, description="Scale between min and max replicas.")
    max_ongoing_requests: int | None = Field(
        None, ge=1, description="Requests one replica takes at once; unset = two full batches per instance, at least 16."
    )


class KubernetesSettings(BaseModel):
    """What `servelab deploy k8s` writes into the manifests."""

    namespace: str = Field("servelab", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description="Namespace of every object.")
    name: str = Field("servelab", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description="Name of the Deployment, Service, ...")
    image: str = Field("servelab:0.1.0", min_length=1, description="Container image built from deploy/Dockerfile.")
    min_replicas: int = Field(1, ge=1, description="HorizontalPodAutoscaler minReplicas.")
    max_replicas: int = Field(4, ge=1, description="HorizontalPodAutoscaler maxReplicas.")
    target_pending_requests: float = Field(
        8.0, gt=0, description="Queued requests per pod (nv_inference_pending_request_count) the HPA aims at."
    )
    storage_uri: str = Field(
        "pvc://servelab-models/repository", min_length=1,
        description="KServe InferenceService storageUri: where KServe fetches the model repository from.",
    )
    cpu: str = Field("2", description="CPU request and limit of a pod.")
    memory: str = Field("4Gi", description="Memory request and limit of a pod.")

    @model_validator(mode="after")
    def _ordered(self) -> KubernetesSettings:
        if self.max_replicas < self.min_replicas:
            raise ValueError(
                f"kubernetes.max_replicas ({self.max_replicas}) is below kubernetes.min_replicas ({self.min_replicas})"
            )
        return self


class DeploySettings(BaseModel):
    """`servelab deploy`: Ray Serve replicas per model and the Kubernetes manifests."""

    instances_as_replicas: bool = Field(
        False, description="Ray: a model's instance_group count becomes its replica count, one instance per "
        "replica (spread over machines); off = every replica runs the instance groups as written.",
    )
    num_replicas: int = Field(1, ge=1, description="Ray: replicas of a model that neither models.<m> nor its instance groups size.")
    cpus_per_instance: float = Field(1.0, ge=0, description="Ray: logical CPUs a replica reserves per KIND_CPU instance.")
    models: dict[str, ModelDeploySettings] = Field(default_factory=dict, description="Ray: per-model overrides.")
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)


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


class RoutingSettings(BaseModel):
    """Version routing (core/routing): where rollout state persists, how gates are evaluated, the shadow budget."""

    state_db: Path | None = Field(
        None, description="sqlite file holding rollouts, default versions, labels set by promotions and the audit "
        "log, so that a restart resumes a rollout at the step it was at; unset = kept in memory (lost at restart).",
    )
    evaluate_every_s: float = Field(1.0, gt=0, description="How often the gates of running rollouts are evaluated.")
    shadow_threads: int = Field(
        2, ge=1, le=64, description="Threads that run shadow copies: their own executor, apart from the primaries."
    )
    shadow_queue: int = Field(
        64, ge=1, description="Shadow copies waiting or running at once; past it new copies are shed (counted), the "
        "primary request is never delayed.",
    )
    window_samples: int = Field(
        20000, ge=100, description="Latency samples kept per variant and rollout step for the P99 gate (the newest)."
    )

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


class ServerSettings(BaseSettings):
    """Everything `servelab serve` needs. Flags override SERVELAB_* variables, which override the settings
    file, which overrides the defaults (see :meth:`from_file`)."""

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
