"""Inflating compressed gRPC messages on the HTTP/2 door (servelab.frontends.grpc.h2.compression)."""

from __future__ import annotations

import gzip
import zlib

import grpc
import pytest

from servelab.frontends.grpc.h2.compression import CompressionRefused, inflate

MESSAGE = bytes(range(256)) * 40


def test_gzip_and_deflate_inflate_to_the_message() -> None:
    assert inflate(gzip.compress(MESSAGE), "gzip", len(MESSAGE)) == MESSAGE
    assert inflate(zlib.compress(MESSAGE), "deflate", len(MESSAGE)) == MESSAGE


@pytest.mark.parametrize("encoding", ["snappy", "identity", ""])
def test_other_encodings_are_unimplemented_and_say_what_is_taken(encoding: str) -> None:
    with pytest.raises(CompressionRefused) as info:
        inflate(gzip.compress(MESSAGE), encoding, 1 << 20)
    assert info.value.code == grpc.StatusCode.UNIMPLEMENTED
    assert "gzip" in info.value.message and "deflate" in info.value.message


def test_inflating_stops_at_the_limit() -> None:
    bomb = gzip.compress(b"\0" * (8 << 20))  # 8 MiB of zeros in ~8 KiB
    with pytest.raises(CompressionRefused) as info:
        inflate(bomb, "gzip", 1 << 20)
    assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "limit" in info.value.message
    assert inflate(gzip.compress(b"\0" * (1 << 20)), "gzip", 1 << 20) == b"\0" * (1 << 20)  # exactly the limit


@pytest.mark.parametrize("payload", [gzip.compress(MESSAGE)[:-12], b"not compressed at all", zlib.compress(MESSAGE)])
def test_corrupt_or_truncated_messages_are_internal_errors(payload: bytes) -> None:
    with pytest.raises(CompressionRefused) as info:
        inflate(payload, "gzip", 1 << 20)
    assert info.value.code == grpc.StatusCode.INTERNAL
    assert "gzip" in info.value.message
