"""Long flat number lists of a large JSON request, decoded chunk by chunk straight into numpy.

``orjson.loads`` of a 16 MB body of numbers makes one Python object per element (32 bytes and more each:
13-20x the body at peak, measured). For bodies above the off-loop threshold, :func:`lift_lists` first
finds every ``"data": [ ... ]`` whose text is a long run of number characters, and swaps it in a copy of
the header for a marker object ``{"<nonce>": k}``; the rest of the header (names, shapes, parameters)
goes through orjson as usual. :meth:`LiftedLists.take` then decodes list ``k`` in chunks of
``_CHUNK_BYTES`` (split at commas), each through the very same ``array_from_json`` as small requests,
into one preallocated array: peak memory is the body, the arrays and one chunk's Python objects.

Anything else falls back to the plain path, so the result is always the one orjson would give: nested
lists (their text holds brackets), BOOL and BYTES inputs, and a marker that does not end up as exactly
one input's ``data`` (a key that merely ends in ``data``, a ``data`` parameter) raise :class:`NotLifted`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from servelab.errors import InvalidArgument
from servelab.protocol.codecs import array_from_json
from servelab.types import DataType

__all__ = ["LiftedLists", "NotLifted", "lift_lists"]

#: ``"data": [`` (the list's opening bracket ends the match)
_DATA_KEY = re.compile(rb'"data"\s*:\s*\[')
#: characters a flat list of JSON numbers is made of (no brackets, quotes or letters but exponents)
_NUMBER_CHARS = re.compile(rb"[0-9eE.+\-,\s]*")
#: lists shorter than this stay in the header: orjson is faster for them and they cost little memory
MIN_LIST_BYTES = 64 * 1024
_CHUNK_BYTES = 256 * 1024
#: bytes the chunks of the key search overlap by (``"data"`` and its colon and bracket, with spaces between)
_KEY_OVERLAP = 64
_LIFTABLE = frozenset(DataType) - {DataType.BOOL, DataType.BYTES}


class NotLifted(Exception):
    """The lifted form does not match the request's structure: decode the original body instead."""


@dataclass(slots=True)
class LiftedLists:
    """The lists taken out of one body: their (start, end) byte offsets and the marker key."""

    body: bytes | bytearray
    spans: list[tuple[int, int]]
    key: str
    taken: set[int] = field(default_factory=set)

    def take(self, data: Any, datatype: DataType, shape: tuple[int, ...], count: int, name: str) -> np.ndarray | None:
        """The array for an input whose ``data`` is a marker; None when ``data`` is an ordinary value."""
        if not isinstance(data, dict) or self.key not in data:
            return None
        index = data[self.key]
        if len(data) != 1 or not isinstance(index, int) or index in self.taken or datatype not in _LIFTABLE:
            raise NotLifted(name)
        self.taken.add(index)
        start, end = self.spans[index]
        return _decode(self.body, start, end, datatype, count, name).reshape(shape)

    def check_all_taken(self) -> None:
        if len(self.taken) != len(self.spans):
            raise NotLifted("a lifted list is not an input's data")


def lift_lists(body: bytes | bytearray) -> tuple[bytes, LiftedLists] | None:
    """(header with markers, the lifted lists), or None when the body has no long flat number list."""
    key = "$servelab-list-" + os.urandom(6).hex()
    spans: list[tuple[int, int]] = []
    pieces: list[bytes | bytearray] = []
    last = 0
    match = _next_data_key(body, 0)
    while match is not None:
        opening = match.end() - 1
        closing = _end_of_numbers(body, opening + 1)
        if closing >= len(body) or body[closing] != ord("]") or closing - opening < MIN_LIST_BYTES:
            match = _next_data_key(body, opening + 1)
            continue
        pieces += (body[last:opening], b'{"%s":%d}' % (key.encode(), len(spans)))
        spans.append((opening + 1, closing))
        last = closing + 1
        match = _next_data_key(body, last)  # past the list: its text is never searched
    if not spans:
        return None
    pieces.append(body[last:])
    return b"".join(pieces), LiftedLists(body, spans, key)


def _next_data_key(body: bytes | bytearray, pos: int) -> re.Match[bytes] | None:
    """The next ``"data": [`` from ``pos``, searched a chunk at a time: one search through a 64 MB list held
    the GIL for ~50 ms (the small requests' P99 of tests/integration/test_limits_large_body.py). Chunks
    overlap by ``_KEY_OVERLAP`` bytes; a key with more whitespace than that inside it is not lifted (its
    list then goes through orjson whole: the same answer, more memory)."""
    size = len(body)
    while pos < size:
        stop = min(size, pos + _CHUNK_BYTES + _KEY_OVERLAP)
        found = _DATA_KEY.search(body, pos, stop)
        if found is not None or stop == size:
            return found
        pos = stop - _KEY_OVERLAP
    return None


def _end_of_numbers(body: bytes | bytearray, start: int) -> int:
    """Where the run of number characters from ``start`` ends, matched a chunk at a time: one match
    over 64 MB would hold the GIL (and with it the event loop) for a tenth of a second."""
    pos = start
    while True:
        stop = min(len(body), pos + _CHUNK_BYTES)
        end = _NUMBER_CHARS.match(body, pos, stop).end()  # type: ignore[union-attr]  # `*` always matches
        if end < stop or stop == len(body):
            return end
        pos = end


def _decode(body: bytes | bytearray, start: int, end: int, datatype: DataType, count: int, name: str) -> np.ndarray:
    out = np.empty(count, dtype=datatype.numpy_dtype)
    filled = 0
    pos = start
    first = True
    while True:
        stop = end
        if end - pos > _CHUNK_BYTES:
            comma = body.find(b",", pos + _CHUNK_BYTES, end)
            stop = end if comma < 0 else comma
        try:
            values = orjson.loads(b"[" + body[pos:stop] + b"]")
        except orjson.JSONDecodeError as exc:
            raise InvalidArgument(f"tensor '{name}': 'data' is not a valid list of JSON numbers: {exc}") from None
        if not values and not first:
            raise InvalidArgument(f"tensor '{name}': 'data' has a trailing comma")
        first = False
        if filled + len(values) > count:
            raise InvalidArgument(
                f"tensor '{name}': shape needs {count} elements; data has at least {filled + len(values)}"
            )
        out[filled : filled + len(values)] = array_from_json(values, datatype, (len(values),), name)
        filled += len(values)
        if stop >= end:
            break
        pos = stop + 1
    if filled != count:
        raise InvalidArgument(f"tensor '{name}': shape needs {count} elements; data has {filled}")
    return out
