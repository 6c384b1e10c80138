"""OIP / Triton gRPC front-end: ``inference.GRPCInferenceService`` and ``grpc.health.v1.Health``."""

from servelab.frontends.grpc.server import DEFAULT_MAX_MESSAGE_BYTES, bound_port, start_grpc_server

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "bound_port", "start_grpc_server"]
