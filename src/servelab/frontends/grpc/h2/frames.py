"""HTTP/2 framing (RFC 9113) for the gRPC door: frame headers, the few header blocks it sends, gRPC's message prefix.

Response header blocks are HPACK literals without indexing (RFC 7541 6.2.2), so they never touch the
decoder state of the peer and the fixed ones are built once.
"""

from __future__ import annotations

import struct
from urllib.parse import quote

__all__ = [
    "CONNECTION_PREFACE",
    "CONTINUATION",
    "DATA",
    "FLAG_ACK",
    "FLAG_END_HEADERS",
    "FLAG_END_STREAM",
    "FLAG_PADDED",
    "FLAG_PRIORITY",
    "GOAWAY",
    "HEADERS",
    "PING",
    "PRIORITY",
    "PUSH_PROMISE",
    "RESPONSE_HEADERS",
    "RST_STREAM",
    "SETTINGS",
    "WINDOW_UPDATE",
    "frame",
    "grpc_message",
    "literal",
    "strip_padding",
    "trailers",
]

CONNECTION_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
FLAG_END_STREAM = 0x1
FLAG_ACK = 0x1
FLAG_END_HEADERS = 0x4
FLAG_PADDED = 0x8
FLAG_PRIORITY = 0x20

_U32 = struct.Struct(">I")
_PREFIX = struct.Struct(">BI")


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One frame: 24-bit length, type, flags, 31-bit stream id, payload."""
    return _U32.pack((len(payload) << 8) | kind) + bytes((flags,)) + _U32.pack(stream_id) + payload


def _length(raw: bytes) -> bytes:
    """An HPACK string length with a 7-bit prefix, no Huffman (RFC 7541 5.1)."""
    n = len(raw)
    if n < 127:
        return bytes((n,))
    out = bytearray((127,))
    n -= 127
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def literal(name: str, value: str) -> bytes:
    """A header field as a literal without indexing, with a new name."""
    raw_name, raw_value = name.encode("ascii"), value.encode("ascii")
    return b"\x00" + _length(raw_name) + raw_name + _length(raw_value) + raw_value


#: ``:status 200`` (static table index 8) and ``content-type: application/grpc``
RESPONSE_HEADERS = b"\x88" + literal("content-type", "application/grpc")
_OK_TRAILERS = literal("grpc-status", "0")


def grpc_message(payload: bytes) -> bytes:
    """A gRPC length-prefixed message, not compressed."""
    return _PREFIX.pack(0, len(payload)) + payload


def trailers(status: int, message: str = "", metadata: tuple[tuple[str, str], ...] = ()) -> bytes:
    """The header block that ends a call: grpc-status, grpc-message (percent-encoded) and trailing metadata."""
    if status == 0 and not message and not metadata:
        return _OK_TRAILERS
    block = literal("grpc-status", str(status))
    if message:
        block += literal("grpc-message", quote(message, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~"))
    for key, value in metadata:
        block += literal(key, value)
    return block


def strip_padding(flags: int, payload: bytes) -> bytes:
    """A DATA or HEADERS payload without its padding; ValueError when the padding is longer than the frame."""
    if not flags & FLAG_PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise ValueError("padding longer than the frame")
    return payload[1: len(payload) - payload[0]]
