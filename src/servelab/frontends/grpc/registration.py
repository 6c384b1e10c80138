"""Which gRPC methods are registered with gRPC core: the hot ones only.

grpc.aio's server keeps one pending request-call future per registered method, plus one for every generic
(unregistered) method, and after each call that arrives it awaits ``asyncio.wait`` over all of them again.
The generated ``add_*Servicer_to_server`` functions register every method of a service (and add a generic
handler for them too), so with the five services of servelab's gRPC port (34 methods) each RPC paid for
``asyncio.wait`` over 35 futures: in a bare uvloop loop 41.7 us per wake-up against 11.1 us for 2, on the
event loop that also runs the models. Registering only the hot methods keeps that at 2-3 futures; the other
methods are found by their service's generic handler (a dict lookup), as in grpc releases before
registered methods.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import grpc.aio

__all__ = ["HotMethodsOnly"]


class HotMethodsOnly:
    """What the generated ``add_*Servicer_to_server`` functions are given as the server: generic handlers go
    through; registered method handlers only for the methods in ``hot`` (``"/package.Service/Method"``)."""

    def __init__(self, server: grpc.aio.Server, hot: frozenset[str]) -> None:
        self._server = server
        self._hot = hot

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        hot = {m: h for m, h in handlers.items() if f"/{service}/{m}" in self._hot}
        if hot:
            self._server.add_registered_method_handlers(service, hot)
