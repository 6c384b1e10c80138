"""Reading a request body within limits (Content-Length checked before a byte is read; gzip/deflate),
and running the work on a large one in a worker thread so that the event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from starlette.requests import Request

from servelab.errors import InvalidArgument, PayloadTooLarge

__all__ = ["off_loop_if_large", "read_body"]

P = ParamSpec("P")
T = TypeVar("T")

#: bodies declared larger than this are read into one preallocated buffer, chunk by chunk, and inflated
#: in a worker thread: joining or inflating 64 MB at once would hold the GIL (and so the loop) ~30 ms
LARGE_BODY_BYTES = 1024 * 1024

_WBITS = {"gzip": 31, "deflate": 15}


def _too_large(size: int | str, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"request body is {size} bytes; the limit is {limit} bytes (settings limits.max_body_bytes, "
        "flag --max-body-bytes)"
    )


async def read_body(request: Request, limit: int) -> bytes | bytearray:
    """The whole body, refusing (413) anything over ``limit`` bytes before reading it when possible."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise InvalidArgument(f"Content-Length {declared!r} is not an integer") from None
        if size > limit:
            raise _too_large(size, limit)
        body = await (_read_into_buffer(request, size) if size > LARGE_BODY_BYTES else request.body())
    else:
        chunks: list[bytes] = []
        total = 0
        async for chunk in request.stream():
            total += len(chunk)
            if total > limit:
                raise _too_large(f"more than {limit}", limit)
            chunks.append(chunk)
        body = b"".join(chunks)
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    return await off_loop_if_large(len(body), LARGE_BODY_BYTES, _decompress, body, encoding, limit)


async def _read_into_buffer(request: Request, size: int) -> bytearray:
    """The body as a bytearray of the declared size (a bytes-like object the decoders all take)."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    filled = 0
    async for chunk in request.stream():
        if filled + len(chunk) > size:
            raise InvalidArgument(f"request body is longer than its Content-Length {size}")
        view[filled : filled + len(chunk)] = chunk
        filled += len(chunk)
    if filled != size:
        raise InvalidArgument(f"request body has {filled} bytes but Content-Length says {size}")
    return buffer  # bytes-like, and no copy of 64 MB on the loop


def _decompress(body: bytes | bytearray, encoding: str, limit: int) -> bytes:
    wbits = _WBITS.get(encoding)
    if wbits is None:
        raise InvalidArgument(f"Content-Encoding {encoding!r} is not supported; use gzip, deflate or identity")
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise InvalidArgument(f"request body is not valid {encoding} data: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise _too_large(f"more than {limit} (decompressed)", limit)
    return out


async def off_loop_if_large(size: int, threshold: int, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args)`` inline when ``size`` bytes are at most ``threshold``, else in the loop's executor.

    Small bodies stay inline: a thread hop costs more than decoding them. A large one (64 MB of JSON
    takes about a second) would hold every other request on this loop for as long.
    """
    if size <= threshold:
        return fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)
