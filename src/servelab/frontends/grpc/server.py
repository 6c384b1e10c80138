"""Start the gRPC front door: ``inference.GRPCInferenceService`` plus ``grpc.health.v1.Health`` (and TF
Serving's services, servelab's ``servelab.rollout.v1.RolloutService``).

``server = await start_grpc_server(dataplane, "127.0.0.1", 0)`` returns the started server;
``bound_port(server)`` is the port actually bound (useful with port 0); ``await server.stop(grace_s)``
stops it.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import grpc.aio

from servelab.config.settings import LimitSettings
from servelab.core.dataplane import DataPlane
from servelab.frontends.grpc.registration import HotMethodsOnly
from servelab.frontends.grpc.rollout_servicer import RolloutServicer
from servelab.frontends.grpc.servicer import HealthServicer, InferenceServicer
from servelab.frontends.grpc.tfserving_servicer import ModelServicer, PredictionServicer
from servelab.frontends.shared_memory import SharedMemory
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc
from servelab.protocol import health_pb2_grpc, rollout_pb2_grpc
from servelab.protocol import tfserving as tfs
from servelab.repository.tfserving import TfServingRepository

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "bound_port", "start_grpc_server"]

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_PORT_ATTRIBUTE = "servelab_bound_port"
#: the only methods registered with gRPC core; every other one is served by its service's generic handler
HOT_METHODS = frozenset({
    "/inference.GRPCInferenceService/ModelInfer",
    "/tensorflow.serving.PredictionService/Predict",
})  # fmt: skip


async def start_grpc_server(
    dataplane: DataPlane,
    host: str,
    port: int,
    *,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    credentials: grpc.ServerCredentials | None = None,
    limits: LimitSettings | None = None,
    tfserving: TfServingRepository | None = None,
    shared_memory: SharedMemory | None = None,
    reuse_port: bool = False,
) -> grpc.aio.Server:
    """Bind ``host:port`` (0 picks a free port), start serving and return the started server.

    The port actually bound is ``bound_port(server)`` (also the attribute ``server.servelab_bound_port``).
    Messages above ``max_message_bytes`` are refused by gRPC with RESOURCE_EXHAUSTED; ``limits`` (the
    settings' LimitSettings) bound the streams per connection, tensor shapes and error messages. Stop the server
    with ``await server.stop(grace_s)``. Raises OSError when the address cannot be bound.
    ``interceptors`` run before every handler (servelab.frontends.auth's door); ``credentials`` (from
    ``grpc.ssl_server_credentials``) serve TLS instead of plain text. TF Serving's PredictionService
    and ModelService share the port; ``tfserving`` (a served TF Serving config) takes config reloads.
    ``shared_memory`` holds the regions clients register (the server's, shared with its REST port).
    ``reuse_port``: the port is shared with the other processes of the same server (SO_REUSEPORT); off,
    binding a port another process serves fails.
    """
    if max_message_bytes <= 0:
        raise ValueError(f"max_message_bytes must be positive; got {max_message_bytes}")
    limits = limits if limits is not None else LimitSettings()
    server = grpc.aio.server(
        interceptors=list(interceptors) or None,
        options=[
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_concurrent_streams", limits.grpc_max_concurrent_streams),
            ("grpc.so_reuseport", int(reuse_port)),
        ]
    )
    inference = InferenceServicer(dataplane, limits=limits, shared_memory=shared_memory)
    services = HotMethodsOnly(server, HOT_METHODS)
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(inference, services)
    health_pb2_grpc.add_HealthServicer_to_server(HealthServicer(dataplane), services)
    rollout_pb2_grpc.add_RolloutServiceServicer_to_server(RolloutServicer(dataplane), services)
    tfs.prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionServicer(dataplane, max_elements=max_message_bytes), services)
    tfs.model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelServicer(dataplane, tfserving), services)
    address = f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
    try:
        if credentials is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, credentials)
    except RuntimeError as exc:
        raise OSError(f"gRPC server cannot bind {address}: {exc}") from None
    if bound == 0:
        raise OSError(f"gRPC server cannot bind {address}")
    setattr(server, _PORT_ATTRIBUTE, bound)
    await server.start()
    return server


def bound_port(server: grpc.aio.Server) -> int:
    """The TCP port a server from :func:`start_grpc_server` listens on."""
    port = getattr(server, _PORT_ATTRIBUTE, None)
    if port is None:
        raise ValueError("this server was not started by start_grpc_server")
    return int(port)
