"""``servelab.rollout.v1.RolloutService``: rollout control over gRPC (management key), one RPC per action.

The messages carry the same JSON documents as the REST routes (:mod:`servelab.frontends.rest.rollouts`):
the spec of ``Start`` is a :class:`~servelab.core.routing.RolloutSpec`, every reply the status document.
The work (sqlite, gate quantiles) runs in a worker thread; errors leave through the one gRPC error table.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeAlias

import grpc.aio
import orjson

from servelab.core.dataplane import DataPlane
from servelab.errors import InvalidArgument
from servelab.frontends.grpc.errors import rpc
from servelab.protocol import rollout_pb2 as pb
from servelab.protocol import rollout_pb2_grpc as pb_grpc

__all__ = ["RolloutServicer"]

Context: TypeAlias = grpc.aio.ServicerContext


def _reply(status: dict[str, Any]) -> pb.RolloutReply:
    return pb.RolloutReply(status_json=orjson.dumps(status, option=orjson.OPT_SERIALIZE_NUMPY).decode())


def _model(request: pb.RolloutRequest) -> str:
    if not request.model:
        raise InvalidArgument("RolloutRequest.model is empty; name the model whose rollout this is")
    return request.model


class RolloutServicer(pb_grpc.RolloutServiceServicer):
    def __init__(self, dataplane: DataPlane) -> None:
        self.dataplane = dataplane

    async def _act(self, request: pb.RolloutRequest, action: str) -> pb.RolloutReply:
        return _reply(await asyncio.to_thread(self.dataplane.rollout_action, _model(request), action))

    @rpc
    async def Status(self, request: pb.RolloutRequest, context: Context) -> pb.RolloutReply:
        return _reply(await asyncio.to_thread(self.dataplane.rollout_status, _model(request)))

    @rpc
    async def Start(self, request: pb.RolloutRequest, context: Context) -> pb.RolloutReply:
        try:
            spec = orjson.loads(request.spec_json or "{}")
        except orjson.JSONDecodeError as exc:
            raise InvalidArgument(f"RolloutRequest.spec_json is not JSON: {exc}") from None
        if not isinstance(spec, dict):
            raise InvalidArgument(f"RolloutRequest.spec_json must be a JSON object; got {type(spec).__name__}")
        return _reply(await asyncio.to_thread(self.dataplane.start_rollout, _model(request), spec))

    @rpc
    async def Pause(self, request: pb.RolloutRequest, context: Context) -> pb.RolloutReply:
        return await self._act(request, "pause")

    @rpc
    async def Resume(self, request: pb.RolloutRequest, context: Context) -> pb.RolloutReply:
        return await self._act(request, "resume")

    @rpc
    async def Abort(self, request: pb.RolloutRequest, context: Context) -> pb.RolloutReply:
        return await self._act(request, "abort")

    @rpc
    async def Promote(self, request: pb.RolloutRequest, context: Context) -> pb.RolloutReply:
        return await self._act(request, "promote")
