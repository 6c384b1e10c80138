"""OIP / Triton gRPC front-end: ``inference.GRPCInferenceService`` and ``grpc.health.v1.Health``."""

from servelab.frontends.grpc.server import DEFAULT_MAX_MESSAGE_BYTES, bound_port, start_grpc_server
from servelab.frontends.grpc.torchserve_server import start_torchserve_grpc_server

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "bound_port", "start_grpc_server", "start_torchserve_grpc_server"]
