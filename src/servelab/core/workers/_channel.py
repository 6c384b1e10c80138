"""The worker channel: small headers over a socket pair, tensor bytes in shared memory.

One ``AF_UNIX``/``SOCK_SEQPACKET`` socket pair per worker carries one message per packet: a
marshalled tuple ``(kind, id, ack, body)``. ``id`` ties messages of one exchange together (a
request, a call), so several exchanges can be in flight at once in either direction: the server's
requests to the worker, the worker's calls back into the server (Triton's BLS, also to decoupled
models: many answers per call), several responses per request (decoupled models: RESPONSE messages,
the last one flagged final) and custom-metric updates. ``ack`` is how many of the peer's messages the
sender has finished reading, so the peer can reuse their shared memory: the worker frees every block
that way, the server frees a request's blocks when its result arrives and the blocks of its answers
to the worker's calls by the worker's ack (:data:`ACKED`).

Tensors never travel in the header: the header holds descriptors ``(name, datatype, shape,
segment, offset, nbytes)`` into the sender's :mod:`arena <servelab.core.workers._arena>`; fixed-size
types are raw row-major bytes, BYTES is Triton's binary layout (a 4-byte little-endian length before
each element). A new arena segment is announced by an ``ARENA`` packet carrying its file descriptor,
sent before the first message that uses it.
"""

from __future__ import annotations

import array
import marshal
import os
import select
import socket
import threading
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from servelab.core.workers._arena import ArenaReader, ArenaWriter, aligned
from servelab.errors import ErrorCode, InternalError, InvalidArgument, ServelabError
from servelab.protocol.codecs import array_from_raw, array_to_raw
from servelab.types import DataType

__all__ = [
    "ACKED",
    "ARENA",
    "CALL",
    "CALL_CANCEL",
    "CALL_ITEM",
    "CALL_RESULT",
    "CALL_STREAM",
    "CANCEL",
    "EXECUTE",
    "FAILED",
    "LOAD",
    "METRIC",
    "QUERY",
    "QUERY_RESULT",
    "READY",
    "RESPONSE",
    "RESULT",
    "STOP",
    "STREAM",
    "Channel",
    "Descriptor",
    "Put",
    "error_entry",
    "error_from",
]

# message kinds (plain ints: marshal writes builtin types only)
LOAD = 1  #: server -> worker: what to load (body: dict)
READY = 2  #: worker -> server: loaded (body: pid)
FAILED = 3  #: worker -> server: load failed (body: (code, message))
EXECUTE = 4  #: server -> worker: run requests (id: request id; body: (linger, [descriptors per request]))
RESULT = 5  #: worker -> server: per request (0, descriptors) | (1, code, message); timings
CALL = 6  #: worker -> server: infer another model (id: call id; body: (model, version, descriptors))
CALL_RESULT = 7  #: server -> worker: (0, descriptors) | (1, code, message)
STOP = 8  #: server -> worker: unload and exit
ARENA = 9  #: either way: a new shared-memory segment (id: segment; body: size; its fd in SCM_RIGHTS)
STREAM = 10  #: server -> worker: run decoupled requests (id: request id; body: [(descriptors, parameters, outputs, client's id)])
RESPONSE = 11  #: worker -> server: one response (id: request id; body: (index, entry | None, final, parameters))
CANCEL = 12  #: server -> worker: the client of a decoupled request has gone (id: request id)
CALL_STREAM = 13  #: worker -> server: call a model, every response wanted (id: call id; body: (model, version, descriptors, parameters))
CALL_ITEM = 14  #: server -> worker: one response to a CALL_STREAM (body: (entry | None, final, parameters))
CALL_CANCEL = 15  #: worker -> server: no more responses wanted for a CALL_STREAM (id: call id)
METRIC = 16  #: worker -> server: a custom-metric update, not answered (body: (op, family, labels, value, buckets))
QUERY = 17  #: worker -> server: a question about custom metrics (id: call id; body: (what, *arguments))
QUERY_RESULT = 18  #: server -> worker: (0, value) | (1, code, message)

#: ``owner`` of blocks freed once the peer has read the message (the server's answers to calls)
ACKED = -1

#: Largest header; a message needing more fails with an error that says so.
HEADER_MAX = 64 * 1024
_MAX_FDS = 4
_MESSAGE_CHARS = 4000

Descriptor = tuple[str, str, tuple[int, ...], int, int, int]
#: Writes arrays into the sender's arena and returns their descriptors.
Put = Callable[[dict[str, np.ndarray]], list[Descriptor]]

_NAMES: dict[np.dtype[Any], str] = {d.numpy_dtype: d.value for d in DataType if d is not DataType.BYTES}
#: dtypes numpy exports through the buffer protocol (bfloat16 is not one)
_BUFFERS = {dt for dt in _NAMES if dt.kind in "biuf"}
_TRUNCATED = int(socket.MSG_TRUNC | socket.MSG_CTRUNC)
_DTYPES: dict[str, np.dtype[Any]] = {v: k for k, v in _NAMES.items()}
_ERRORS: dict[str, type[ServelabError]] = {}


def _register_errors(cls: type[ServelabError]) -> None:
    for sub in cls.__subclasses__():
        _ERRORS.setdefault(sub.code.value, sub)
        _register_errors(sub)


_register_errors(ServelabError)
_ERRORS[ErrorCode.INTERNAL.value] = InternalError


def error_entry(exc: BaseException) -> tuple[int, str, str]:
    """A result entry for an error: its neutral code and message (shortened), nothing else crosses."""
    if isinstance(exc, ServelabError):
        code, message = exc.code.value, exc.message
    else:
        code, message = ErrorCode.INTERNAL.value, f"{type(exc).__name__}: {exc}"
    if len(message) > _MESSAGE_CHARS:
        message = message[:_MESSAGE_CHARS] + " ..."
    return 1, code, message


def error_from(code: str, message: str) -> ServelabError:
    return _ERRORS.get(code, InternalError)(message)


class Channel:
    """One end of a worker's socket pair with its two arenas (ours to write, the peer's to read).

    ``send`` is thread-safe; ``recv`` is meant for one reader at a time. ``release_acked`` (the
    worker's side) frees our blocks by the peer's acks; the server instead releases a request's
    blocks by owner id when its result arrives (:meth:`release`).
    """

    def __init__(self, sock: socket.socket, writer: ArenaWriter, *, release_acked: bool) -> None:
        self.sock = sock
        self.writer = writer
        self.reader = ArenaReader()
        self.release_acked = release_acked
        self._lock = threading.Lock()
        self._buf = bytearray(HEADER_MAX)
        self._view = memoryview(self._buf)
        self._ancsize = socket.CMSG_SPACE(_MAX_FDS * 4)
        self._sent = 0  # data messages sent (their sequence numbers: the worker's block owners)
        self._returned = 0  # data messages returned by recv
        self._handled = 0  # ... of which fully read (everything before the latest recv call)
        self._peer_ack = 0
        self._to_release: deque[int] = deque()
        self._acked: deque[int] = deque()  # sequence numbers of messages whose blocks go with the peer's ack
        self._closed = False
        self._poller = select.poll()
        self._poller.register(sock, select.POLLIN)

    # ----- sending -----
    def send(self, kind: int, msg_id: int, body: Any = None, build: Callable[[Put], Any] | None = None,
             owner: int = 0) -> None:
        """Send one message; ``build(put)`` makes a body holding tensors (written under the lock).

        Blocks written by ``put`` belong to ``owner`` (default: this message's sequence number; ACKED:
        freed once the peer has read this message, on a side that frees by owner).
        """
        with self._lock:
            seq = self._sent + 1
            self._release_due()
            if build is not None:
                if owner == ACKED:
                    owner = -seq
                    self._acked.append(seq)
                body = build(partial(self._put, owner=owner or seq))
            header = marshal.dumps((kind, msg_id, self._handled, body))
            if len(header) > HEADER_MAX:
                raise InternalError(f"worker message of {len(header)} bytes exceeds the {HEADER_MAX}-byte header limit")
            self._announce()
            self.sock.send(header)
            self._sent = seq

    def release(self, owner: int) -> None:
        """Free ``owner``'s blocks at the next send (any thread)."""
        self._to_release.append(owner)

    def _release_due(self) -> None:
        if self._to_release:
            owners = []
            while self._to_release:
                owners.append(self._to_release.popleft())
            self.writer.release(owners)
        if self.release_acked:
            self.writer.release_upto(self._peer_ack)
        done = []
        while self._acked and self._acked[0] <= self._peer_ack:
            done.append(-self._acked.popleft())
        if done:
            self.writer.release(done)

    def _announce(self) -> None:
        for seg_id, fd, size in self.writer.announce:
            packet = marshal.dumps((ARENA, seg_id, self._handled, size))
            self.sock.sendmsg([packet], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
        self.writer.announce.clear()

    def _put(self, arrays: dict[str, np.ndarray], owner: int) -> list[Descriptor]:
        """Write every array into ONE block of our arena; their descriptors."""
        plan: list[tuple[str, str, np.ndarray, bytes | None, int]] = []
        total = 0
        for name, a in arrays.items():
            dt = _NAMES.get(a.dtype)
            raw = None
            if dt is None:
                if a.dtype.kind not in "OSU":
                    raise InvalidArgument(f"tensor '{name}' has numpy dtype {a.dtype}, which no OIP datatype carries")
                dt, raw = "BYTES", array_to_raw(a, DataType.BYTES)
                nbytes = len(raw)
            else:
                nbytes = a.nbytes
            plan.append((name, dt, a, raw, nbytes))
            total += aligned(nbytes)
        seg, offset, mm = self.writer.alloc(total, owner) if total else (-1, 0, None)
        descriptors: list[Descriptor] = []
        for name, dt, a, raw, nbytes in plan:
            if nbytes:
                assert mm is not None
                if raw is not None:
                    mm[offset : offset + nbytes] = raw
                elif a.dtype in _BUFFERS and a.flags.c_contiguous:
                    mm[offset : offset + nbytes] = a.data.cast("B")
                else:
                    np.ndarray(a.shape, a.dtype, buffer=mm, offset=offset)[...] = a
            descriptors.append((name, dt, a.shape, seg, offset, nbytes))
            offset += aligned(nbytes)
        return descriptors

    # ----- receiving -----
    def recv(self) -> tuple[int, int, Any]:
        """The next (kind, id, body), waiting for it; EOFError when the peer has gone.

        Arena packets are handled here. Calling it again acknowledges the previous message: read its
        tensors before that.
        """
        message = self._recv(0)
        assert message is not None
        return message

    def recv_ready(self) -> tuple[int, int, Any] | None:
        """Like :meth:`recv`, but None at once when no message is there (the socket stays blocking)."""
        return self._recv(socket.MSG_DONTWAIT)

    def _recv(self, flags: int) -> tuple[int, int, Any] | None:
        self._handled = self._returned
        while True:
            try:
                n, ancdata, got, _ = self.sock.recvmsg_into([self._buf], self._ancsize, flags)
            except BlockingIOError:
                return None
            if n == 0:
                raise EOFError("the peer closed the channel")
            if got & _TRUNCATED:
                raise EOFError("a worker message was truncated (protocol error)")
            kind, msg_id, ack, body = marshal.loads(self._view[:n])
            self._peer_ack = ack
            if kind == ARENA:
                self.reader.attach(msg_id, _received_fd(ancdata), body)
                continue
            self._returned += 1
            return kind, msg_id, body

    def readable(self, timeout_s: float) -> bool:
        """Whether a message (or the end) is there within ``timeout_s``; for one reader at a time."""
        try:
            return bool(self._poller.poll(timeout_s * 1000))
        except (ValueError, OSError, RuntimeError):  # closed meanwhile: recv says so
            return True

    def done_reading(self) -> None:
        """Acknowledge every message returned so far (its tensors are read) in our next header."""
        self._handled = self._returned

    def arrays(self, descriptors: list[Descriptor], *, copy: bool) -> dict[str, np.ndarray]:
        """Tensors from the peer's arena: copies (``copy``) or views valid until their blocks are reused."""
        out: dict[str, np.ndarray] = {}
        for name, dt, shape, segment, offset, nbytes in descriptors:
            if dt == "BYTES":
                raw = memoryview(self.reader.maps[segment])[offset : offset + nbytes] if nbytes else b""
                out[name] = array_from_raw(raw, DataType.BYTES, tuple(shape), name)
                continue
            dtype = _DTYPES[dt]
            if not nbytes:
                out[name] = np.empty(shape, dtype)
                continue
            view = np.ndarray(shape, dtype, buffer=self.reader.maps[segment], offset=offset)
            out[name] = view.copy() if copy else view
        return out

    def close(self) -> None:
        """Close the socket and unmap our arena (idempotent: the reader and close() may both call it)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.sock.close()
            self.writer.close()


def _received_fd(ancdata: list[tuple[int, int, bytes]]) -> int:
    fds = array.array("i")
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if not fds:
        raise EOFError("an arena announcement came without its file descriptor")
    for extra in fds[1:]:
        os.close(extra)
    return fds[0]
