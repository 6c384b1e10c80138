"""TorchServe's two gRPC ports: the inference API (TorchServe's 7070) and the management API (7071).

Each is a grpc.aio server of its own, so that each port answers only its own service, as TorchServe's
do; the door's interceptors (keys: inference key for predictions, management key for management)
and TLS are the same as on servelab's gRPC port.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import grpc.aio

from servelab.config.settings import ServerSettings
from servelab.core.dataplane import DataPlane
from servelab.frontends.grpc.registration import HotMethodsOnly
from servelab.frontends.grpc.torchserve_servicer import (
    TorchServeInferenceServicer,
    TorchServeManagementServicer,
)
from servelab.protocol import torchserve as ts_pb

__all__ = ["start_torchserve_grpc_server"]

_KINDS = ("torchserve_grpc_inference", "torchserve_grpc_management")
_HOT_METHODS = frozenset({"/org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions"})


async def start_torchserve_grpc_server(
    kind: str,
    dataplane: DataPlane,
    settings: ServerSettings,
    port: int,
    *,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    credentials: grpc.ServerCredentials | None = None,
) -> grpc.aio.Server:
    """Serve TorchServe's ``kind`` API on ``settings.host:port`` (0 = a free port); the bound port is
    ``server.servelab_bound_port``. Raises OSError when the address cannot be bound."""
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}; got {kind!r}")
    limit = settings.limits.max_body_bytes
    server = grpc.aio.server(
        interceptors=list(interceptors) or None,
        options=[("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit),
                 ("grpc.max_concurrent_streams", settings.limits.grpc_max_concurrent_streams), ("grpc.so_reuseport", 0)],
    )  # fmt: skip
    services = HotMethodsOnly(server, _HOT_METHODS)  # see registration.py
    if kind == "torchserve_grpc_inference":
        ts_pb.inference_pb2_grpc.add_InferenceAPIsServiceServicer_to_server(
            TorchServeInferenceServicer(dataplane, settings), services)
    else:
        ts_pb.management_pb2_grpc.add_ManagementAPIsServiceServicer_to_server(
            TorchServeManagementServicer(dataplane, settings), services)
    host = settings.host
    address = f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
    try:
        bound = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    except RuntimeError as exc:
        raise OSError(f"TorchServe gRPC server cannot bind {address}: {exc}") from None
    if bound == 0:
        raise OSError(f"TorchServe gRPC server cannot bind {address}")
    server.servelab_bound_port = bound  # type: ignore[attr-defined]
    await server.start()
    return server
