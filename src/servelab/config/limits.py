"""Limits checked before memory is allocated for a request (body, tensor, time, connection sizes)."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = ["LimitSettings"]


class LimitSettings(BaseModel):
    """Limits checked before memory is allocated for a request."""

    max_body_bytes: int = Field(64 * 1024 * 1024, gt=0, description="Largest request body accepted (413 above).")
    max_tensor_elements: int = Field(
        64 * 1024 * 1024, gt=0, description="Largest element count of any one input tensor."
    )
    request_timeout_s: float = Field(60.0, gt=0, description="Time a request may take end to end (server side).")
    max_tensor_rank: int = Field(
        32, gt=0, le=64, description="Most dimensions a request tensor may have (numpy's own ceiling is 64)."
    )
    offload_decode_bytes: int = Field(
        1024 * 1024, ge=0, description="Request bodies (and responses) above this size are decoded (encoded) "
        "in a worker thread so that the event loop keeps serving small requests; 0 offloads every one."
    )
    http_header_timeout_s: float = Field(
        10.0, gt=0, description="Time a client has to send a request's headers, from the connection or the "
        "request's first byte; slower clients are answered 408 and disconnected (slowloris)."
    )
    http_keep_alive_timeout_s: int = Field(30, gt=0, description="Idle seconds before a keep-alive HTTP "
                                           "connection is closed.")
    http_max_header_bytes: int = Field(
        64 * 1024, ge=1024, description="Largest request line plus headers; larger ones are answered 431."
    )
    http_max_connections: int = Field(
        1000, gt=0, description="Open connections per HTTP port; requests past it are answered 503. Lowered at "
        "start to fit the process's open-file limit (RLIMIT_NOFILE)."
    )
    grpc_max_concurrent_streams: int = Field(
        1000, gt=0, description="Concurrent gRPC calls per client connection (grpc.max_concurrent_streams); "
        "further calls wait in the client."
    )
    grpc_max_error_bytes: int = Field(
        2048, ge=64, le=2600, description="Longest gRPC error message (UTF-8 bytes), cut with a marker: "
        "percent-encoded it stays under the 8 KiB of trailing metadata a stock gRPC client accepts."
    )
