"""Compressed request messages on the HTTP/2 door: gzip and deflate, as grpcio's server takes them.

A gRPC message whose compressed flag is set was compressed with the algorithm its call's ``grpc-encoding``
header names (gRPC's compression spec). The door inflates ``gzip`` (RFC 1952) and ``deflate`` (the zlib
format, RFC 1950, as gRPC core writes it) and answers any other name, or a flag without a name, with
UNIMPLEMENTED saying what it takes. Inflating stops one byte past the message limit, so a small
compressed message cannot grow into a large one in memory (a "zip bomb" is refused RESOURCE_EXHAUSTED
as an over-limit message is). Responses go out uncompressed, which every gRPC client reads.
"""

from __future__ import annotations

import zlib

import grpc

__all__ = ["ACCEPTED", "CompressionRefused", "inflate"]

#: zlib ``wbits`` per gRPC encoding name
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}

#: what ``grpc-accept-encoding`` would say
ACCEPTED = "identity,deflate,gzip"


class CompressionRefused(Exception):
    """A compressed message the door does not inflate: the call ends with ``code``."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def inflate(payload: bytes, encoding: str, limit: int) -> bytes:
    """``payload`` inflated with ``encoding`` (gzip or deflate), at most ``limit`` bytes."""
    wbits = _WBITS.get(encoding)
    if wbits is None:
        raise CompressionRefused(grpc.StatusCode.UNIMPLEMENTED,
                                 f"compressed messages in {encoding or 'an unnamed encoding'} are not served; "
                                 f"send one of {ACCEPTED}")  # fmt: skip
    inflater = zlib.decompressobj(wbits)
    try:
        message = inflater.decompress(payload, limit + 1)
    except zlib.error as exc:
        raise CompressionRefused(grpc.StatusCode.INTERNAL, f"the {encoding} message does not inflate: {exc}") from None
    if len(message) > limit:
        raise CompressionRefused(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                 f"received message inflates past the limit of {limit} bytes")  # fmt: skip
    if not inflater.eof:
        raise CompressionRefused(grpc.StatusCode.INTERNAL, f"the {encoding} message is truncated")
    return message
