"""TorchServe's JSON on the wire: Gson's pretty printing, its error body and its gRPC error descriptions.

TorchServe's frontend writes every JSON answer with ``GsonBuilder().setPrettyPrinting()
.disableHtmlEscaping()`` (two-space indent, ``"key": value``) followed by a newline on REST;
``json.dumps(indent=2, ensure_ascii=False)`` writes the same bytes for the objects these APIs send.
Errors are ``{"code", "type", "message"}`` where ``type`` is the Java exception's simple name; over
gRPC the status details are the message, a newline and the exception's full class name.
"""

from __future__ import annotations

import json
from typing import Any

import grpc

from servelab.errors import ErrorCode, ServelabError

__all__ = [
    "INTERNAL_EXCEPTION",
    "MODEL_NOT_FOUND",
    "exception_for",
    "grpc_code",
    "gson",
    "http_status",
    "rest_error_body",
    "rest_json",
]

INTERNAL_EXCEPTION = "org.pytorch.serve.http.InternalServerException"
MODEL_NOT_FOUND = "org.pytorch.serve.archive.model.ModelNotFoundException"
_CLASSES = {
    400: "org.pytorch.serve.http.BadRequestException",
    401: "org.pytorch.serve.http.InvalidKeyException",
    404: MODEL_NOT_FOUND,
    405: "org.pytorch.serve.http.MethodNotAllowedException",
    409: "org.pytorch.serve.http.ConflictStatusException",
    413: "org.pytorch.serve.http.RequestEntityTooLargeException",
    503: "org.pytorch.serve.http.ServiceUnavailableException",
}
_HTTP = {
    ErrorCode.INVALID_ARG: 400, ErrorCode.NOT_FOUND: 404, ErrorCode.UNAVAILABLE: 503,
    ErrorCode.RESOURCE_EXHAUSTED: 503, ErrorCode.PAYLOAD_TOO_LARGE: 413, ErrorCode.UNSUPPORTED: 405,
    ErrorCode.ALREADY_EXISTS: 409, ErrorCode.UNAUTHENTICATED: 401, ErrorCode.CANCELLED: 499,
    ErrorCode.INTERNAL: 500,
}  # fmt: skip
#: TorchServe's GRPCUtils.getGRPCStatusCode
_GRPC = {
    400: grpc.StatusCode.INVALID_ARGUMENT, 401: grpc.StatusCode.UNAUTHENTICATED, 403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND, 409: grpc.StatusCode.ABORTED, 413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED, 416: grpc.StatusCode.OUT_OF_RANGE, 499: grpc.StatusCode.CANCELLED,
    504: grpc.StatusCode.DEADLINE_EXCEEDED, 501: grpc.StatusCode.UNIMPLEMENTED, 503: grpc.StatusCode.UNAVAILABLE,
}  # fmt: skip


def gson(value: Any) -> str:
    """``value`` as TorchServe's Gson pretty printer writes it."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def rest_json(value: Any) -> bytes:
    """A REST JSON body: Gson's text and the newline TorchServe adds."""
    return (gson(value) + "\n").encode()


def exception_for(status: int) -> str:
    """The full Java class name of TorchServe's exception for an HTTP status."""
    return _CLASSES.get(status, INTERNAL_EXCEPTION)


def rest_error_body(status: int, message: str, kind: str | None = None) -> bytes:
    """TorchServe's ``ErrorResponse``: ``{"code", "type", "message"}``."""
    simple = (kind or exception_for(status)).rsplit(".", 1)[-1]
    return rest_json({"code": status, "type": simple, "message": message})


def http_status(exc: ServelabError) -> int:
    return _HTTP.get(exc.code, 500)


def grpc_code(status: int) -> grpc.StatusCode:
    """TorchServe's mapping of an HTTP status to a gRPC code."""
    if status in _GRPC:
        return _GRPC[status]
    if 200 <= status < 300:
        return grpc.StatusCode.OK
    if 400 <= status < 500:
        return grpc.StatusCode.FAILED_PRECONDITION
    return grpc.StatusCode.INTERNAL if 500 <= status < 600 else grpc.StatusCode.UNKNOWN
