"""The ONE table of what is protected: every REST route and gRPC method -> Triton API group -> level.

A route or method missing from these tables is refused when a door is built (``unclassified``), so a new
route cannot slip through open. ``None`` as a group means "always open" (Prometheus ``/metrics``).

Levels: ``OPEN`` (health: load balancers and probes need it), ``INFERENCE`` (needs the inference key when
one is set; the management key is accepted too), ``MANAGEMENT`` (needs the management key when one is set;
beyond loopback one must be). Triton's restricted groups are checked on top, per group, whatever the level.
"""

from __future__ import annotations

from enum import Enum

from servelab.config.settings import ApiGroup

__all__ = ["GRPC_METHODS", "LEVEL", "REST_ROUTES", "Level", "UnclassifiedRoute", "rest_group"]


class Level(str, Enum):
    OPEN = "open"
    INFERENCE = "inference"
    MANAGEMENT = "management"


LEVEL: dict[ApiGroup, Level] = {
    ApiGroup.HEALTH: Level.OPEN,
    ApiGroup.METADATA: Level.INFERENCE,
    ApiGroup.INFERENCE: Level.INFERENCE,
    ApiGroup.MODEL_CONFIG: Level.INFERENCE,
    ApiGroup.STATISTICS: Level.INFERENCE,
    ApiGroup.SHARED_MEMORY: Level.MANAGEMENT,
    ApiGroup.MODEL_REPOSITORY: Level.MANAGEMENT,
    ApiGroup.TRACE: Level.MANAGEMENT,
    ApiGroup.LOGGING: Level.MANAGEMENT,
}

_MODEL = "/v2/models/{model}"
_VERSION = "/v2/models/{model}/versions/{version}"
_TS_MODEL = "/models/{model}"

#: (method, Starlette path template) -> group, for the HTTP, management and metrics ports.
REST_ROUTES: dict[tuple[str, str], ApiGroup | None] = {
    # Open Inference Protocol + Triton extensions (HTTP port)
    ("GET", "/v2/health/live"): ApiGroup.HEALTH,
    ("GET", "/v2/health/ready"): ApiGroup.HEALTH,
    ("GET", "/v2"): ApiGroup.METADATA,
    ("GET", "/v2/"): ApiGroup.METADATA,
    ("GET", "/v2/models/stats"): ApiGroup.STATISTICS,
    ("POST", "/v2/repository/index"): ApiGroup.MODEL_REPOSITORY,
    ("POST", "/v2/repository/models/{model}/load"): ApiGroup.MODEL_REPOSITORY,
    ("POST", "/v2/repository/models/{model}/unload"): ApiGroup.MODEL_REPOSITORY,
    **{("POST", p + "/infer"): ApiGroup.INFERENCE for p in (_MODEL, _VERSION)},
    **{("GET", p + "/ready"): ApiGroup.HEALTH for p in (_MODEL, _VERSION)},
    **{("GET", p + "/config"): ApiGroup.MODEL_CONFIG for p in (_MODEL, _VERSION)},
    **{("GET", p + "/stats"): ApiGroup.STATISTICS for p in (_MODEL, _VERSION)},
    **{("GET", p): ApiGroup.METADATA for p in (_MODEL, _VERSION)},
    # Triton's shared-memory, trace and logging extensions (HTTP port)
    **{("GET", f"/v2/{kind}sharedmemory{r}/status"): ApiGroup.SHARED_MEMORY
       for kind in ("system", "cuda") for r in ("", "/region/{region}")},
    **{("POST", f"/v2/{kind}sharedmemory{r}"): ApiGroup.SHARED_MEMORY
       for kind in ("system", "cuda") for r in ("/region/{region}/register", "/unregister", "/region/{region}/unregister")},
    **{(m, p): ApiGroup.TRACE for m in ("GET", "POST") for p in ("/v2/trace/setting", _MODEL + "/trace/setting")},
    ("GET", "/v2/logging"): ApiGroup.LOGGING,
    ("POST", "/v2/logging"): ApiGroup.LOGGING,
    # servelab's rollout control (HTTP port): it changes which version serves, so management level
    ("GET", _MODEL + "/rollout"): ApiGroup.MODEL_REPOSITORY,
    ("POST", _MODEL + "/rollout"): ApiGroup.MODEL_REPOSITORY,
    ("POST", _MODEL + "/rollout/{action}"): ApiGroup.MODEL_REPOSITORY,
    # TensorFlow Serving REST (HTTP port): status / metadata, and :predict / :classify / :regress
    ("GET", "/v1/models/{path:path}"): ApiGroup.METADATA,
    ("POST", "/v1/models/{path:path}"): ApiGroup.INFERENCE,
    # TorchServe inference API (HTTP port)
    ("GET", "/ping"): ApiGroup.HEALTH,
    ("POST", "/predictions/{model}"): ApiGroup.INFERENCE,
    ("PUT", "/predictions/{model}"): ApiGroup.INFERENCE,
    ("POST", "/predictions/{model}/{version}"): ApiGroup.INFERENCE,
    ("PUT", "/predictions/{model}/{version}"): ApiGroup.INFERENCE,
    ("POST", "/predictions/{model}/{version}/{path:path}"): ApiGroup.INFERENCE,
    ("PUT", "/predictions/{model}/{version}/{path:path}"): ApiGroup.INFERENCE,
    # TorchServe management API (management port): all of it is repository control
    ("OPTIONS", "/"): ApiGroup.MODEL_REPOSITORY,
    ("GET", "/models"): ApiGroup.MODEL_REPOSITORY,
    ("POST", "/models"): ApiGroup.MODEL_REPOSITORY,
    **{(m, p): ApiGroup.MODEL_REPOSITORY for m in ("GET", "PUT", "DELETE")
       for p in (_TS_MODEL, _TS_MODEL + "/{version}")},
    ("PUT", _TS_MODEL + "/{version}/set-default"): ApiGroup.MODEL_REPOSITORY,
    # Prometheus (HTTP and metrics ports): open, like Triton's metrics port
    ("GET", "/metrics"): None,
}

_OIP = "/inference.GRPCInferenceService/"
_TFS = "/tensorflow.serving.PredictionService/"
_TS_INFERENCE = "/org.pytorch.serve.grpc.inference.InferenceAPIsService/"
_TS_MANAGEMENT = "/org.pytorch.serve.grpc.management.ManagementAPIsService/"

#: gRPC full method name -> group (Triton's assignment of its RPCs to restricted protocols).
GRPC_METHODS: dict[str, ApiGroup] = {
    **{_OIP + m: ApiGroup.HEALTH for m in ("ServerLive", "ServerReady", "ModelReady")},
    "/grpc.health.v1.Health/Check": ApiGroup.HEALTH,
    "/grpc.health.v1.Health/Watch": ApiGroup.HEALTH,
    _OIP + "ServerMetadata": ApiGroup.METADATA,
    _OIP + "ModelMetadata": ApiGroup.METADATA,
    _OIP + "ModelInfer": ApiGroup.INFERENCE,
    _OIP + "ModelStreamInfer": ApiGroup.INFERENCE,
    _OIP + "ModelConfig": ApiGroup.MODEL_CONFIG,
    _OIP + "ModelStatistics": ApiGroup.STATISTICS,
    **{_OIP + m: ApiGroup.MODEL_REPOSITORY
       for m in ("RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload")},
    **{_OIP + f"{kind}SharedMemory{op}": ApiGroup.SHARED_MEMORY
       for kind in ("System", "Cuda") for op in ("Status", "Register", "Unregister")},
    _OIP + "TraceSetting": ApiGroup.TRACE,
    _OIP + "LogSettings": ApiGroup.LOGGING,
    # TensorFlow Serving's services (same port)
    **{_TFS + m: ApiGroup.INFERENCE for m in ("Predict", "Classify", "Regress", "MultiInference")},
    _TFS + "GetModelMetadata": ApiGroup.METADATA,
    "/tensorflow.serving.ModelService/GetModelStatus": ApiGroup.METADATA,
    "/tensorflow.serving.ModelService/HandleReloadConfigRequest": ApiGroup.MODEL_REPOSITORY,
    # servelab's rollout control (same port): management level, like repository control
    **{f"/servelab.rollout.v1.RolloutService/{m}": ApiGroup.MODEL_REPOSITORY
       for m in ("Status", "Start", "Pause", "Resume", "Abort", "Promote")},
    # TorchServe's services (their own ports): health, predictions; management is repository control
    _TS_INFERENCE + "Ping": ApiGroup.HEALTH,
    **{_TS_INFERENCE + m: ApiGroup.INFERENCE for m in ("Predictions", "StreamPredictions", "StreamPredictions2")},
    **{_TS_MANAGEMENT + m: ApiGroup.MODEL_REPOSITORY
       for m in ("DescribeModel", "ListModels", "RegisterModel", "ScaleWorker", "SetDefault", "UnregisterModel")},
}


class UnclassifiedRoute(LookupError):
    """A route that the table does not name: refused rather than served open."""


def rest_group(method: str, path: str) -> ApiGroup | None:
    """The group of one REST route (``HEAD`` is ``GET``); raises :class:`UnclassifiedRoute` if unknown."""
    key = ("GET" if method == "HEAD" else method, path)
    if key not in REST_ROUTES:
        raise UnclassifiedRoute(f"{method} {path} is not in servelab.frontends.auth.routes.REST_ROUTES")
    return REST_ROUTES[key]
