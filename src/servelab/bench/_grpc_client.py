"""Open Inference Protocol over gRPC (``inference.GRPCInferenceService/ModelInfer``, raw_input_contents).

Requests are serialised once; the call is made with pre-serialised bytes and the response is received
as bytes, so the load loop does no protobuf work.
"""

from __future__ import annotations

import grpc
import grpc.aio

from servelab.bench import _encode
from servelab.bench.client_base import Client, RequestFailed
from servelab.bench.inputs import Request
from servelab.protocol import grpc_service_pb2

__all__ = ["INFER_METHOD", "OipGrpcClient", "encode_infer_request"]

INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"
_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


def encode_infer_request(model: str, version: str, request: Request) -> bytes:
    msg = grpc_service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for name, array in request.items():
        t = msg.inputs.add()
        t.name = name
        t.datatype = _encode.datatype_of(array)
        t.shape.extend(array.shape)
        msg.raw_input_contents.append(_encode.tensor_bytes(array))
    return msg.SerializeToString()


class OipGrpcClient(Client):
    def __init__(self, target: object, model: str, max_inflight: int) -> None:
        super().__init__(target, model, max_inflight)  # type: ignore[arg-type]
        self._bodies: list[bytes] = []
        self._channel: grpc.aio.Channel | None = None
        self._call: grpc.aio.UnaryUnaryMultiCallable | None = None

    @property
    def n_prepared(self) -> int:
        return len(self._bodies)

    def prepare(self, requests: list[Request]) -> None:
        self._bodies = [encode_infer_request(self.model, self.target.model_version, r) for r in requests]

    async def start(self) -> None:
        self._channel = grpc.aio.insecure_channel(self.target.grpc_address(), options=_OPTIONS)
        self._call = self._channel.unary_unary(
            INFER_METHOD, request_serializer=None, response_deserializer=None
        )

    async def send(self, index: int) -> None:
        assert self._call is not None, "start() must be awaited before send()"
        try:
            await self._call(self._bodies[index], timeout=self.target.timeout_s)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            kind = "timeout" if code == grpc.StatusCode.DEADLINE_EXCEEDED else f"grpc_{code.name}"
            raise RequestFailed(kind, exc.details() or "") from exc

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
