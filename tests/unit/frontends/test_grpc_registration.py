"""Only the hot methods are registered with gRPC core; every method still answers through its service's
generic handler. The generated registration code is the real one; the server side is a recorder of what
it is given (what grpc.aio would register), and a real server answers a control call at the end."""

from __future__ import annotations

import asyncio
from collections import namedtuple
from typing import Any

import grpc
import grpc.aio

from servelab.frontends.grpc.registration import HotMethodsOnly
from servelab.frontends.grpc.server import HOT_METHODS
from servelab.protocol import grpc_service_pb2 as pb
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc

_Details = namedtuple("_Details", ["method", "invocation_metadata"])


class _Recorder:
    def __init__(self) -> None:
        self.generic: list[Any] = []
        self.registered: dict[str, set[str]] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self.generic.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.registered.setdefault(service, set()).update(handlers)


def test_only_model_infer_is_registered_and_every_method_has_a_generic_handler() -> None:
    recorder = _Recorder()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(pb_grpc.GRPCInferenceServiceServicer(),
                                                       HotMethodsOnly(recorder, HOT_METHODS))  # type: ignore[arg-type]
    assert recorder.registered == {"inference.GRPCInferenceService": {"ModelInfer"}}
    methods = [m.name for m in pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods]
    assert len(methods) == 20
    for name in methods:
        details = _Details(f"/inference.GRPCInferenceService/{name}", ())
        assert any(h.service(details) is not None for h in recorder.generic), name


def test_a_service_without_hot_methods_registers_nothing() -> None:
    recorder = _Recorder()
    HotMethodsOnly(recorder, HOT_METHODS).add_registered_method_handlers(  # type: ignore[arg-type]
        "grpc.health.v1.Health", {"Check": object()})  # type: ignore[dict-item]
    assert recorder.registered == {}


def test_unregistered_methods_answer_on_a_real_server() -> None:
    class Servicer(pb_grpc.GRPCInferenceServiceServicer):
        async def ServerLive(self, request: Any, context: Any) -> pb.ServerLiveResponse:
            return pb.ServerLiveResponse(live=True)

        async def ModelInfer(self, request: Any, context: Any) -> pb.ModelInferResponse:
            return pb.ModelInferResponse(model_name=request.model_name)

    async def main() -> tuple[bool, str]:
        server = grpc.aio.server()
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(Servicer(), HotMethodsOnly(server, HOT_METHODS))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = pb_grpc.GRPCInferenceServiceStub(channel)
                live = await stub.ServerLive(pb.ServerLiveRequest(), timeout=10)
                infer = await stub.ModelInfer(pb.ModelInferRequest(model_name="m"), timeout=10)
                return live.live, infer.model_name
        finally:
            await server.stop(0)

    assert asyncio.run(main()) == (True, "m")
