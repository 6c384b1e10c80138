"""TorchServe's wire schemas (``org.pytorch.serve.grpc.inference`` and ``.management``), generated from
``specs/torchserve`` (TorchServe's published .proto files), so TorchServe's own gRPC clients talk to
servelab unchanged: ``from servelab.protocol import torchserve as ts_pb`` then ``ts_pb.inference_pb2``.
"""

from __future__ import annotations

from servelab.protocol.codegen import generate as _generate

_generate()

from servelab.protocol._generated.torchserve import (  # noqa: E402
    inference_pb2,
    inference_pb2_grpc,
    management_pb2,
    management_pb2_grpc,
)

#: the full service names, as gRPC method paths start
INFERENCE_SERVICE = "org.pytorch.serve.grpc.inference.InferenceAPIsService"
MANAGEMENT_SERVICE = "org.pytorch.serve.grpc.management.ManagementAPIsService"

__all__ = [
    "INFERENCE_SERVICE",
    "MANAGEMENT_SERVICE",
    "inference_pb2",
    "inference_pb2_grpc",
    "management_pb2",
    "management_pb2_grpc",
]
