"""A gRPC call's invocation metadata as the router reads request headers (a policy's sticky key)."""

from __future__ import annotations

import grpc.aio

__all__ = ["Metadata"]


class Metadata:
    """``get(name)`` over a call's invocation metadata, read only when a routing policy asks for a key."""

    __slots__ = ("_context", "_items")

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self._context = context
        self._items: dict[str, str] | None = None

    def get(self, key: str, /) -> str | None:
        if self._items is None:
            pairs = self._context.invocation_metadata() or ()
            self._items = {k.lower(): v for k, v in pairs if isinstance(v, str)}
        return self._items.get(key.lower())
