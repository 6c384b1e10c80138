"""One HTTP/2 connection of the gRPC door: frames in, calls dispatched, responses out under flow control.

Each call runs as one task (``dispatch.run_call``). A unary call starts when its request is complete and
writes its response headers, message and trailers in one ``transport.write`` when the peer's windows
allow, or as the peer's WINDOW_UPDATEs open them. A streaming call starts at its headers; its request
messages reach it through the stream's inbox, and its responses go out as it yields them, in order,
under the same flow control. Protocol errors end the connection with GOAWAY; a call's errors end that
call with its grpc-status.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from typing import cast

import grpc
import hpack

from servelab.frontends.grpc.h2 import frames as f
from servelab.frontends.grpc.h2.calls import MethodTable
from servelab.frontends.grpc.h2.dispatch import Refused, run_call
from servelab.frontends.grpc.h2.responses import ResponseWriter

__all__ = ["H2Connection"]

log = logging.getLogger("servelab.grpc.h2")

_U32 = struct.Struct(">I")
_SETTING = struct.Struct(">HI")
_MAX_WINDOW = 2**31 - 1
_OUR_STREAM_WINDOW = 1 << 20
_DEFAULT_WINDOW = 65535
# error codes (RFC 9113 7)
_PROTOCOL_ERROR, _FLOW_CONTROL_ERROR, _FRAME_SIZE_ERROR, _REFUSED_STREAM, _CANCEL = 0x1, 0x3, 0x6, 0x7, 0x8
#: a streaming call's messages that may wait in its inbox before the client's window stays shut
_INBOX_MESSAGES = 16


class _Stream:
    __slots__ = ("block", "chunks", "consumed", "ended", "headers", "inbox", "overflow", "partial", "received",
                 "sent_headers", "task")  # fmt: skip

    def __init__(self) -> None:
        self.block: list[bytes] = []  # header block fragments until END_HEADERS
        self.headers: list[tuple[str, str]] | None = None
        self.chunks: list[bytes] = []
        self.received = 0
        self.consumed = 0
        self.ended = False
        self.task: asyncio.Task[None] | None = None
        # streaming calls only: (compressed flag, message) items, then None at END_STREAM
        self.inbox: asyncio.Queue[tuple[int, bytes] | Refused | None] | None = None
        self.partial = bytearray()  # the bytes of a message not yet complete
        self.overflow: Refused | None = None  # a message went over the limit: the call ends with this
        self.sent_headers = False


class _ConnectionError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class H2Connection(ResponseWriter, asyncio.Protocol):
    """The server side of one HTTP/2 connection carrying gRPC calls."""

    def __init__(self, table: MethodTable, *, max_message_bytes: int, max_concurrent_streams: int) -> None:
        self.table = table
        self.max_message_bytes = max_message_bytes
        self.max_streams = max_concurrent_streams
        self.transport: asyncio.Transport | None = None
        self._buffer = b""
        self._preface_seen = False
        self._decoder = hpack.Decoder()
        self._decoder.max_header_list_size = 64 * 1024
        self._streams: dict[int, _Stream] = {}
        self._last_stream = 0
        self._continuing = 0  # the stream whose header block awaits CONTINUATION
        self._consumed = 0  # DATA bytes taken in since our last connection WINDOW_UPDATE
        self._send_window = _DEFAULT_WINDOW
        self._peer_stream_window = _DEFAULT_WINDOW
        self._peer_max_frame = 16384
        self._stream_windows: dict[int, int] = {}
        # per stream, in order: (data left, trailers that end the call or None) held by flow control
        self._pending: dict[int, deque[tuple[memoryview, bytes | None]]] = {}
        self._drains: dict[int, asyncio.Future[None]] = {}
        self.peer = ""
        self._closing = False

    # -- connection ----------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio.Transport subclasses
        peer = self.transport.get_extra_info("peername")
        self.peer = f"ipv4:{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        settings = _SETTING.pack(0x3, self.max_streams) + _SETTING.pack(0x4, _OUR_STREAM_WINDOW)
        self.transport.write(f.frame(f.SETTINGS, 0, 0, settings)
                        + f.frame(f.WINDOW_UPDATE, 0, 0, _U32.pack(_MAX_WINDOW - _DEFAULT_WINDOW)))  # fmt: skip

    def connection_lost(self, exc: Exception | None) -> None:
        for stream in self._streams.values():
            if stream.task is not None:
                stream.task.cancel()
        self._streams.clear()
        self._pending.clear()
        for drain in self._drains.values():
            drain.cancel()

    def close(self, last_error: int = 0) -> None:
        """GOAWAY, then close once the calls under way have answered (at once when there are none)."""
        if self.transport is None or self._closing:
            return
        self._closing = True
        self.transport.write(f.frame(f.GOAWAY, 0, 0, _U32.pack(self._last_stream) + _U32.pack(last_error)))
        if not any(s.task for s in self._streams.values()):
            self.transport.close()

    # -- frames in -----------------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        buf = self._buffer + data if self._buffer else data
        if not self._preface_seen:
            if len(buf) < len(f.CONNECTION_PREFACE):
                self._buffer = buf
                return
            if not buf.startswith(f.CONNECTION_PREFACE):
                self._fail(_ConnectionError(_PROTOCOL_ERROR, "not an HTTP/2 client preface (gRPC needs HTTP/2)"))
                return
            buf = buf[len(f.CONNECTION_PREFACE):]
            self._preface_seen = True
        out: list[bytes] = []
        pos, end = 0, len(buf)
        try:
            while end - pos >= 9:
                head = _U32.unpack_from(buf, pos)[0]
                length, kind = head >> 8, head & 0xFF
                if length > 16384:
                    raise _ConnectionError(_FRAME_SIZE_ERROR, f"frame of {length} bytes over the 16384 advertised")
                if end - pos < 9 + length:
                    break
                flags = buf[pos + 4]
                stream_id = _U32.unpack_from(buf, pos + 5)[0] & 0x7FFFFFFF
                payload = buf[pos + 9: pos + 9 + length]
                pos += 9 + length
                self._frame(kind, flags, stream_id, payload, out)
        except _ConnectionError as exc:
            self._fail(exc)
            return
        self._buffer = buf[pos:]
        if self._consumed > (1 << 30):
            out.append(f.frame(f.WINDOW_UPDATE, 0, 0, _U32.pack(self._consumed)))
            self._consumed = 0
        if out and self.transport is not None:
            self.transport.write(b"".join(out))

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes, out: list[bytes]) -> None:
        if self._continuing and kind != f.CONTINUATION:
            raise _ConnectionError(_PROTOCOL_ERROR, "a header block was not continued")
        if kind == f.DATA:
            self._data(flags, stream_id, payload, out)
        elif kind == f.HEADERS:
            self._headers(flags, stream_id, payload, out)
        elif kind == f.CONTINUATION:
            if stream_id != self._continuing:
                raise _ConnectionError(_PROTOCOL_ERROR, "CONTINUATION on a stream without an open header block")
            self._header_fragment(self._streams[stream_id], stream_id, flags, payload, out)
        elif kind == f.SETTINGS:
            if not flags & f.FLAG_ACK:
                self._settings(payload)
                out.append(f.frame(f.SETTINGS, f.FLAG_ACK, 0))
        elif kind == f.PING:
            if len(payload) != 8:
                raise _ConnectionError(_FRAME_SIZE_ERROR, "PING payload must be 8 bytes")
            if not flags & f.FLAG_ACK:
                out.append(f.frame(f.PING, f.FLAG_ACK, 0, payload))
        elif kind == f.WINDOW_UPDATE:
            self._window_update(stream_id, payload)
        elif kind == f.RST_STREAM:
            stream = self._streams.pop(stream_id, None)
            self._stream_windows.pop(stream_id, None)
            self._pending.pop(stream_id, None)
            if stream is not None and stream.task is not None:
                stream.task.cancel()
        elif kind == f.GOAWAY:
            self.close()
        elif kind == f.PUSH_PROMISE:
            raise _ConnectionError(_PROTOCOL_ERROR, "clients do not push")
        # PRIORITY and unknown frame types are ignored (RFC 9113 4.1, 5.3.2)

    def _headers(self, flags: int, stream_id: int, payload: bytes, out: list[bytes]) -> None:
        if stream_id % 2 == 0:
            raise _ConnectionError(_PROTOCOL_ERROR, f"client stream ids are odd; got {stream_id}")
        stream = self._streams.get(stream_id)
        if stream is None:
            if stream_id <= self._last_stream:
                raise _ConnectionError(_PROTOCOL_ERROR, f"stream {stream_id} is closed or out of order")
            self._last_stream = stream_id
            stream = _Stream()
            self._streams[stream_id] = stream
        try:
            payload = f.strip_padding(flags, payload)
        except ValueError as exc:
            raise _ConnectionError(_PROTOCOL_ERROR, str(exc)) from None
        if flags & f.FLAG_PRIORITY:
            payload = payload[5:]
        if flags & f.FLAG_END_STREAM:
            stream.ended = True
        self._header_fragment(stream, stream_id, flags, payload, out)

    def _header_fragment(self, stream: _Stream, stream_id: int, flags: int, payload: bytes, out: list[bytes]) -> None:
        stream.block.append(payload)
        if not flags & f.FLAG_END_HEADERS:
            self._continuing = stream_id
            return
        self._continuing = 0
        block = b"".join(stream.block)
        stream.block = []
        try:
            decoded = self._decoder.decode(block, raw=False)
        except hpack.HPACKError as exc:
            raise _ConnectionError(0x9, f"header block cannot be decoded: {exc}") from None  # COMPRESSION_ERROR
        if stream.headers is None:
            stream.headers = [(str(k), str(v)) for k, v in decoded]
            if self._closing or sum(1 for s in self._streams.values() if s.headers is not None) > self.max_streams:
                self._refuse(stream_id, out)
                return
            if self.table.streams(next((v for k, v in stream.headers if k == ":path"), "")):
                stream.inbox = asyncio.Queue()
                self._start(stream_id, stream)
        # a second block is the request's trailers: nothing in them is used
        if stream.ended:
            if stream.inbox is not None:
                self._end_inbox(stream)
            else:
                self._start(stream_id, stream)

    def _data(self, flags: int, stream_id: int, payload: bytes, out: list[bytes]) -> None:
        self._consumed += len(payload)
        stream = self._streams.get(stream_id)
        if stream is None or stream.headers is None:
            return  # refused or reset: the bytes count against the connection window only
        try:
            data = f.strip_padding(flags, payload)
        except ValueError as exc:
            raise _ConnectionError(_PROTOCOL_ERROR, str(exc)) from None
        if stream.inbox is not None:
            self._stream_data(stream_id, stream, flags, data, len(payload), out)
            return
        stream.received += len(data)
        stream.consumed += len(payload)
        if stream.received <= self.max_message_bytes + 5:
            stream.chunks.append(data)
        if flags & f.FLAG_END_STREAM:
            stream.ended = True
            self._start(stream_id, stream)
        elif stream.consumed > _OUR_STREAM_WINDOW // 2:
            out.append(f.frame(f.WINDOW_UPDATE, 0, stream_id, _U32.pack(stream.consumed)))
            stream.consumed = 0

    def _stream_data(self, stream_id: int, stream: _Stream, flags: int, data: bytes, size: int, out: list[bytes]) -> None:
        """A streaming call's DATA: each complete message into its inbox, the window reopened while few wait."""
        inbox = stream.inbox
        assert inbox is not None
        stream.consumed += size
        if stream.overflow is None:
            buf = stream.partial
            buf += data
            while len(buf) >= 5:
                length = int.from_bytes(buf[1:5], "big")
                if length > self.max_message_bytes:
                    stream.overflow = Refused(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                              f"received message of {length} bytes, over the limit of {self.max_message_bytes}")  # fmt: skip
                    inbox.put_nowait(stream.overflow)
                    buf.clear()
                    break
                if len(buf) < 5 + length:
                    break
                inbox.put_nowait((buf[0], bytes(buf[5: 5 + length])))
                del buf[: 5 + length]
        if flags & f.FLAG_END_STREAM:
            stream.ended = True
            self._end_inbox(stream)
        elif stream.consumed > _OUR_STREAM_WINDOW // 2 and (inbox.qsize() < _INBOX_MESSAGES or stream.overflow):
            out.append(f.frame(f.WINDOW_UPDATE, 0, stream_id, _U32.pack(stream.consumed)))
            stream.consumed = 0

    @staticmethod
    def _end_inbox(stream: _Stream) -> None:
        assert stream.inbox is not None
        if stream.partial and stream.overflow is None:
            stream.inbox.put_nowait(Refused(grpc.StatusCode.INTERNAL, "the request stream ended inside a message"))
        stream.inbox.put_nowait(None)

    def _settings(self, payload: bytes) -> None:
        if len(payload) % 6:
            raise _ConnectionError(_FRAME_SIZE_ERROR, "SETTINGS payload must be a multiple of 6 bytes")
        for offset in range(0, len(payload), 6):
            key, value = _SETTING.unpack_from(payload, offset)
            if key == 0x4:  # INITIAL_WINDOW_SIZE: applies to every open stream's window (RFC 9113 6.9.2)
                if value > _MAX_WINDOW:
                    raise _ConnectionError(_FLOW_CONTROL_ERROR, "initial window over 2^31-1")
                delta = value - self._peer_stream_window
                self._peer_stream_window = value
                for sid in self._stream_windows:
                    self._stream_windows[sid] += delta
            elif key == 0x5:
                if not 16384 <= value <= 16777215:
                    raise _ConnectionError(_PROTOCOL_ERROR, f"max frame size {value} out of range")
                self._peer_max_frame = value
        self._flush()

    def _window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise _ConnectionError(_FRAME_SIZE_ERROR, "WINDOW_UPDATE payload must be 4 bytes")
        increment = _U32.unpack(payload)[0] & 0x7FFFFFFF
        if stream_id == 0:
            self._send_window += increment
            if self._send_window > _MAX_WINDOW:
                raise _ConnectionError(_FLOW_CONTROL_ERROR, "connection window over 2^31-1")
        elif stream_id in self._stream_windows:
            self._stream_windows[stream_id] += increment
        self._flush()

    def _fail(self, exc: _ConnectionError) -> None:
        log.info("gRPC connection from %s closed: %s", self.peer, exc)
        if self.transport is not None:
            self.transport.write(f.frame(f.GOAWAY, 0, 0, _U32.pack(self._last_stream) + _U32.pack(exc.code) + str(exc).encode()))
            self.transport.close()

    def _refuse(self, stream_id: int, out: list[bytes]) -> None:
        self._streams.pop(stream_id, None)
        out.append(f.frame(f.RST_STREAM, 0, stream_id, _U32.pack(_REFUSED_STREAM)))

    # -- calls -----------------------------------------------------------------------------------------------
    def _start(self, stream_id: int, stream: _Stream) -> None:
        self._stream_windows[stream_id] = self._peer_stream_window
        stream.task = asyncio.get_running_loop().create_task(run_call(self, stream_id, stream))

    def forget(self, stream_id: int) -> None:
        """A call's task was cancelled: nothing more is sent for it."""
        self._streams.pop(stream_id, None)
        self._stream_windows.pop(stream_id, None)
        self._pending.pop(stream_id, None)

    def call_ended(self) -> None:
        """A call's task is ending: a closing connection closes once nothing is left to answer or send."""
        me = asyncio.current_task()
        others = any(s.task and not s.task.done() and s.task is not me for s in self._streams.values())
        if self._closing and not others and self.transport is not None and not self._pending:
            self.transport.close()

    def credit(self, stream_id: int, stream: _Stream) -> None:
        """A streaming call took a message from its inbox: reopen the client's window once few are waiting."""
        assert stream.inbox is not None
        if stream.consumed and stream.inbox.qsize() < _INBOX_MESSAGES and self.transport is not None \
                and stream_id in self._streams:  # fmt: skip
            self.transport.write(f.frame(f.WINDOW_UPDATE, 0, stream_id, _U32.pack(stream.consumed)))
            stream.consumed = 0
