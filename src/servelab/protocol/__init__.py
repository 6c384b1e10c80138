"""Wire schemas generated from the bundled specifications, and tensor codecs.

Import the generated modules through this package: ``from servelab.protocol import model_config_pb2``.
"""

from __future__ import annotations

from servelab.protocol.codegen import generate as _generate

_generate()

from servelab.protocol._generated import (  # noqa: E402
    grpc_service_pb2,
    grpc_service_pb2_grpc,
    health_pb2,
    health_pb2_grpc,
    model_config_pb2,
    rollout_pb2,
    rollout_pb2_grpc,
)

__all__ = [
    "grpc_service_pb2",
    "grpc_service_pb2_grpc",
    "health_pb2",
    "health_pb2_grpc",
    "model_config_pb2",
    "rollout_pb2",
    "rollout_pb2_grpc",
]
