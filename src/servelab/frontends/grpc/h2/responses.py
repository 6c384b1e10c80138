"""The sending half of an HTTP/2 gRPC connection: response headers, messages and trailers under flow control.

A unary call's response goes out in one ``transport.write`` when the peer's windows allow (``answer``).
What the windows hold back waits per stream, in order, and ``_flush`` sends it as WINDOW_UPDATEs arrive.
A streaming call sends message by message (``send``), waits while its stream is held (``drained``), and
ends with its trailers after everything held (``finish``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from servelab.frontends.grpc.h2 import frames as f

__all__ = ["ResponseWriter"]


class ResponseWriter:
    """Mixed into H2Connection: the state below is its own, set in its ``__init__``."""

    transport: asyncio.Transport | None
    _streams: dict[int, Any]
    _stream_windows: dict[int, int]
    _pending: dict[int, deque[tuple[memoryview, bytes | None]]]
    _drains: dict[int, asyncio.Future[None]]
    _send_window: int
    _peer_max_frame: int
    _closing: bool

    def answer(self, stream_id: int, message: bytes | None, code: Any, details: str,
               trailing: tuple[tuple[str, str], ...] = ()) -> None:  # fmt: skip
        """A unary call's whole response: headers, the message (when there is one) and trailers, in one write."""
        if self.transport is None or self._streams.pop(stream_id, None) is None:
            self._stream_windows.pop(stream_id, None)
            return  # reset or gone
        end = f.trailers(int(code.value[0]), details, trailing)
        if message is None:  # trailers-only
            self._stream_windows.pop(stream_id, None)
            self.transport.write(f.frame(f.HEADERS, f.FLAG_END_HEADERS | f.FLAG_END_STREAM, stream_id,
                                         f.RESPONSE_HEADERS + end))  # fmt: skip
            return
        data = f.grpc_message(message)
        window = self._stream_windows.get(stream_id, 0)
        if len(data) <= min(window, self._send_window, self._peer_max_frame) and not self._pending:
            self._send_window -= len(data)
            self._stream_windows.pop(stream_id, None)
            self.transport.write(f.frame(f.HEADERS, f.FLAG_END_HEADERS, stream_id, f.RESPONSE_HEADERS)
                                 + f.frame(f.DATA, 0, stream_id, data)
                                 + f.frame(f.HEADERS, f.FLAG_END_HEADERS | f.FLAG_END_STREAM, stream_id, end))  # fmt: skip
            return
        self.transport.write(f.frame(f.HEADERS, f.FLAG_END_HEADERS, stream_id, f.RESPONSE_HEADERS))
        self._pending[stream_id] = deque([(memoryview(data), end)])
        self._flush()

    def send(self, stream_id: int, message: bytes) -> bool:
        """One response message of a streaming call (its headers first); True when flow control holds some back."""
        stream = self._streams.get(stream_id)
        if self.transport is None or stream is None:
            raise asyncio.CancelledError  # the client reset the call or went away
        head = b""
        if not stream.sent_headers:
            stream.sent_headers = True
            head = f.frame(f.HEADERS, f.FLAG_END_HEADERS, stream_id, f.RESPONSE_HEADERS)
        data = f.grpc_message(message)
        window = self._stream_windows.get(stream_id, 0)
        if len(data) <= min(window, self._send_window, self._peer_max_frame) and stream_id not in self._pending:
            self._send_window -= len(data)
            self._stream_windows[stream_id] = window - len(data)
            self.transport.write(head + f.frame(f.DATA, 0, stream_id, data))
            return False
        if head:
            self.transport.write(head)
        self._pending.setdefault(stream_id, deque()).append((memoryview(data), None))
        self._flush()
        return stream_id in self._pending

    async def drained(self, stream_id: int) -> None:
        """Wait until flow control has sent everything a streaming call queued."""
        if stream_id in self._pending:
            future = self._drains[stream_id] = asyncio.get_running_loop().create_future()
            try:
                await future
            finally:
                self._drains.pop(stream_id, None)

    def finish(self, stream_id: int, code: Any, details: str, trailing: tuple[tuple[str, str], ...] = ()) -> None:
        """End a streaming call with its status, after the messages flow control still holds."""
        stream = self._streams.get(stream_id)
        if self.transport is None or stream is None:
            return
        if not stream.sent_headers:
            self.answer(stream_id, None, code, details, trailing)
            return
        self._streams.pop(stream_id, None)
        end = f.trailers(int(code.value[0]), details, trailing)
        if stream_id in self._pending:
            self._pending[stream_id].append((memoryview(b""), end))
            return
        self._stream_windows.pop(stream_id, None)
        self.transport.write(f.frame(f.HEADERS, f.FLAG_END_HEADERS | f.FLAG_END_STREAM, stream_id, end))

    def _flush(self) -> None:
        """Send what flow control held back, stream by stream in order, as far as the windows now allow."""
        if self.transport is None:
            return
        out: list[bytes] = []
        for stream_id in list(self._pending):
            if self._send_window <= 0:
                break
            queue = self._pending[stream_id]
            window = self._stream_windows.get(stream_id, 0)
            while queue:
                left, end = queue[0]
                while left and window > 0 and self._send_window > 0:
                    size = min(len(left), window, self._send_window, self._peer_max_frame)
                    out.append(f.frame(f.DATA, 0, stream_id, bytes(left[:size])))
                    left = left[size:]
                    window -= size
                    self._send_window -= size
                if left:
                    queue[0] = (left, end)
                    break
                queue.popleft()
                if end is not None:
                    out.append(f.frame(f.HEADERS, f.FLAG_END_HEADERS | f.FLAG_END_STREAM, stream_id, end))
            self._stream_windows[stream_id] = window
            if not queue:
                del self._pending[stream_id]
                if end is not None:
                    self._stream_windows.pop(stream_id, None)
                drain = self._drains.get(stream_id)
                if drain is not None and not drain.done():
                    drain.set_result(None)
        if out:
            self.transport.write(b"".join(out))
        if self._closing and not self._pending and not any(s.task and not s.task.done() for s in self._streams.values()):
            self.transport.close()
