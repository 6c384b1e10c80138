"""A client for TorchServe's gRPC inference API (``InferenceAPIsService.Predictions``), for benchmarks.

TorchServe documents the service in its ``inference.proto``: ``PredictionsRequest {string model_name = 1;
string model_version = 2; map<string, bytes> input = 3;}`` -> ``PredictionResponse {bytes prediction = 1;}``
in package ``org.pytorch.serve.grpc.inference``. The two messages are declared here with protobuf's
descriptor API (no generated code, no .proto to ship); the handler sees each ``input`` entry as a request
field (``data`` for a body), as with TorchServe's own Python client.

    async with grpc.aio.insecure_channel(endpoint.extra["grpc"]) as channel:
        predict = predictions(channel)
        body = await predict("sage", {"data": b'{"node_ids": [1]}'})
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc.aio
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = ["PACKAGE", "PredictionResponse", "PredictionsRequest", "predictions"]

PACKAGE = "org.pytorch.serve.grpc.inference"
_METHOD = f"/{PACKAGE}.InferenceAPIsService/Predictions"
_F = descriptor_pb2.FieldDescriptorProto


def _messages() -> tuple[Any, Any]:
    proto = descriptor_pb2.FileDescriptorProto(name="servelab_torchserve_inference.proto", package=PACKAGE, syntax="proto3")
    request = proto.message_type.add(name="PredictionsRequest")
    request.field.add(name="model_name", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    request.field.add(name="model_version", number=2, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    request.field.add(name="input", number=3, type=_F.TYPE_MESSAGE, label=_F.LABEL_REPEATED,
                      type_name=f".{PACKAGE}.PredictionsRequest.InputEntry")  # fmt: skip
    entry = request.nested_type.add(name="InputEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=_F.TYPE_BYTES, label=_F.LABEL_OPTIONAL)
    response = proto.message_type.add(name="PredictionResponse")
    response.field.add(name="prediction", number=1, type=_F.TYPE_BYTES, label=_F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.PredictionsRequest")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.PredictionResponse")),
    )


PredictionsRequest, PredictionResponse = _messages()


def predictions(channel: grpc.aio.Channel) -> Callable[[str, dict[str, bytes]], Awaitable[bytes]]:
    """``await call(model, inputs)`` -> the prediction bytes; gRPC errors raise ``grpc.aio.AioRpcError``."""
    method = channel.unary_unary(
        _METHOD, request_serializer=PredictionsRequest.SerializeToString, response_deserializer=PredictionResponse.FromString
    )

    async def call(model: str, inputs: dict[str, bytes]) -> bytes:
        response = await method(PredictionsRequest(model_name=model, input=inputs))
        return bytes(response.prediction)

    return call
