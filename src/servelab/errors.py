"""Protocol-neutral errors. Each front-end maps ErrorCode once, centrally, to its wire status."""

from __future__ import annotations

from enum import Enum

__all__ = [
    "AlreadyExists",
    "Cancelled",
    "ErrorCode",
    "InternalError",
    "InvalidArgument",
    "NotFound",
    "PayloadTooLarge",
    "ResourceExhausted",
    "ServelabError",
    "Unauthenticated",
    "Unavailable",
    "Unknown",
    "Unsupported",
]


class ErrorCode(str, Enum):
    INVALID_ARG = "INVALID_ARG"
    NOT_FOUND = "NOT_FOUND"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    CANCELLED = "CANCELLED"
    INTERNAL = "INTERNAL"
    #: a model (Triton's TRITONSERVER_ERROR_UNKNOWN) could not say what went wrong
    UNKNOWN = "UNKNOWN"


class ServelabError(Exception):
    """Base of every error servelab raises on purpose; carries a neutral code and a message."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class InvalidArgument(ServelabError):
    code = ErrorCode.INVALID_ARG


class NotFound(ServelabError):
    code = ErrorCode.NOT_FOUND


class Unavailable(ServelabError):
    code = ErrorCode.UNAVAILABLE


class Unsupported(ServelabError):
    code = ErrorCode.UNSUPPORTED


class AlreadyExists(ServelabError):
    code = ErrorCode.ALREADY_EXISTS


class ResourceExhausted(ServelabError):
    code = ErrorCode.RESOURCE_EXHAUSTED


class PayloadTooLarge(ServelabError):
    code = ErrorCode.PAYLOAD_TOO_LARGE


class Unauthenticated(ServelabError):
    code = ErrorCode.UNAUTHENTICATED


class Cancelled(ServelabError):
    code = ErrorCode.CANCELLED


class InternalError(ServelabError):
    code = ErrorCode.INTERNAL


class Unknown(ServelabError):
    """An error whose kind its source did not say (a python model's ``TritonError.UNKNOWN``)."""

    code = ErrorCode.UNKNOWN
