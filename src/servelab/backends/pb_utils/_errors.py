"""``pb_utils.TritonError`` (an error a response carries) and ``TritonModelException`` (one a model raises),
and their translation to and from servelab's neutral error codes.

A ``TritonError`` is not an exception, as in Triton: a model puts it in ``InferenceResponse(error=...)``.
Its code travels as servelab's :class:`~servelab.errors.ErrorCode`, so each front door answers it with
the status Triton would (NOT_FOUND -> HTTP 404 / gRPC NOT_FOUND, UNKNOWN -> 400 / UNKNOWN, ...), and its
message reaches the client unchanged.
"""

from __future__ import annotations

from typing import ClassVar

from servelab.errors import (
    AlreadyExists,
    Cancelled,
    ErrorCode,
    InternalError,
    InvalidArgument,
    NotFound,
    ServelabError,
    Unavailable,
    Unknown,
    Unsupported,
)

__all__ = ["TritonError", "TritonModelException", "from_servelab", "to_servelab"]


class TritonError:
    """An error for one response: ``TritonError(message, code=TritonError.INTERNAL)``."""

    # TRITONSERVER_Error_Code values (tritonserver.h)
    UNKNOWN: ClassVar[int] = 0
    INTERNAL: ClassVar[int] = 1
    NOT_FOUND: ClassVar[int] = 2
    INVALID_ARG: ClassVar[int] = 3
    UNAVAILABLE: ClassVar[int] = 4
    UNSUPPORTED: ClassVar[int] = 5
    ALREADY_EXISTS: ClassVar[int] = 6
    CANCELLED: ClassVar[int] = 7

    __slots__ = ("_code", "_message")

    def __init__(self, message: str, code: int = 1) -> None:
        if message is None or code is None:
            raise TypeError("TritonError(message, code): neither may be None")
        if code not in _TO_SERVELAB:
            raise ValueError(f"TritonError code must be one of TritonError.UNKNOWN ... CANCELLED (0-7), got {code!r}")
        self._message = str(message)
        self._code = int(code)

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


class TritonModelException(Exception):
    """What a model raises when ``initialize``, ``execute`` or ``finalize`` cannot go on."""

    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


_TO_SERVELAB: dict[int, type[ServelabError]] = {
    TritonError.UNKNOWN: Unknown,
    TritonError.INTERNAL: InternalError,
    TritonError.NOT_FOUND: NotFound,
    TritonError.INVALID_ARG: InvalidArgument,
    TritonError.UNAVAILABLE: Unavailable,
    TritonError.UNSUPPORTED: Unsupported,
    TritonError.ALREADY_EXISTS: AlreadyExists,
    TritonError.CANCELLED: Cancelled,
}
_FROM_CODE: dict[ErrorCode, int] = {cls.code: triton for triton, cls in _TO_SERVELAB.items()}
_FROM_CODE.update({
    ErrorCode.RESOURCE_EXHAUSTED: TritonError.UNAVAILABLE,
    ErrorCode.PAYLOAD_TOO_LARGE: TritonError.INVALID_ARG,
    ErrorCode.UNAUTHENTICATED: TritonError.INVALID_ARG,
})


def to_servelab(error: TritonError) -> ServelabError:
    """The servelab error a response's TritonError becomes (its message unchanged)."""
    return _TO_SERVELAB[error.code()](error.message())


def from_servelab(error: ServelabError) -> TritonError:
    """The TritonError a model reads for a servelab error (a failed BLS call)."""
    return TritonError(error.message, _FROM_CODE.get(error.code, TritonError.INTERNAL))
