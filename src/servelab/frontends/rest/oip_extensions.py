"""REST routes of Triton's shared-memory, trace and logging extensions (``/v2/systemsharedmemory/...``,
``/v2/cudasharedmemory/...``, ``/v2/trace/setting``, ``/v2/logging``).

They only translate: the regions are the server's :class:`~servelab.frontends.shared_memory.SharedMemory`
(``app.state.shared_memory``, shared with the gRPC port), the settings are
:mod:`servelab.frontends.trace_logging`'s.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from servelab.errors import InvalidArgument
from servelab.frontends.rest._body import read_body
from servelab.frontends.rest._common import dataplane, json_response, settings, shared_memory
from servelab.frontends.rest._oip_codec import parse_json_object
from servelab.frontends.trace_logging import LoggingSettings, trace_settings, update_trace_settings

__all__ = ["routes"]

_SYSTEM = "/v2/systemsharedmemory"
_CUDA = "/v2/cudasharedmemory"


async def _body_object(request: Request, what: str) -> dict[str, Any]:
    body = await read_body(request, settings(request).limits.max_body_bytes)
    return parse_json_object(body, what) if body.strip() else {}


def _integer(body: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{where}: '{key}' must be an integer; got {value!r}")
    return value


# ----- system shared memory -----
async def system_status(request: Request) -> Response:
    return json_response(shared_memory(request).system.status(request.path_params.get("region", "")))


async def system_register(request: Request) -> Response:
    name = request.path_params["region"]
    where = f"register of shared memory region '{name}'"
    body = await _body_object(request, where)
    key = body.get("key")
    if not isinstance(key, str):
        raise InvalidArgument(f"{where}: 'key' must be the shared-memory object's name (a string); got {key!r}")
    offset, size = _integer(body, "offset", where, 0), _integer(body, "byte_size", where)
    shared_memory(request).system.register(name, key, offset, size)
    return Response(status_code=200)


async def system_unregister(request: Request) -> Response:
    shared_memory(request).system.unregister(request.path_params.get("region", ""))
    return Response(status_code=200)


# ----- CUDA shared memory (UNSUPPORTED without a GPU and cuda-python) -----
async def cuda_status(request: Request) -> Response:
    return json_response(shared_memory(request).cuda.status(request.path_params.get("region", "")))


def _raw_handle(body: dict[str, Any], where: str) -> bytes:
    handle = body.get("raw_handle")
    text = handle.get("b64") if isinstance(handle, dict) else None
    try:
        if not isinstance(text, str):
            raise ValueError
        return base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        raise InvalidArgument(
            f"{where}: 'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t, as {{\"b64\": \"...\"}}"
        ) from None


async def cuda_register(request: Request) -> Response:
    name = request.path_params["region"]
    where = f"register of cuda shared memory region '{name}'"
    body = await _body_object(request, where)
    cuda = shared_memory(request).cuda
    if not cuda.available:
        cuda.register(name, b"", 0, 0)  # UNSUPPORTED, saying what is missing
    handle = _raw_handle(body, where)
    cuda.register(name, handle, _integer(body, "device_id", where, 0), _integer(body, "byte_size", where))
    return Response(status_code=200)


async def cuda_unregister(request: Request) -> Response:
    shared_memory(request).cuda.unregister(request.path_params.get("region", ""))
    return Response(status_code=200)


# ----- trace and logging -----
async def trace_setting(request: Request) -> Response:
    model = request.path_params.get("model")
    if model is not None:
        dataplane(request).model_config(model)  # an unknown model is a 404, as for every model route
    if request.method == "GET":
        return json_response(trace_settings())
    return json_response(update_trace_settings(await _body_object(request, "trace settings")))


async def log_settings(request: Request) -> Response:
    logs = LoggingSettings()
    if request.method == "GET":
        return json_response(logs.get())
    return json_response(logs.update(await _body_object(request, "log settings")))


def routes() -> list[BaseRoute]:
    out: list[BaseRoute] = []
    for base, status, register, unregister in (
        (_SYSTEM, system_status, system_register, system_unregister),
        (_CUDA, cuda_status, cuda_register, cuda_unregister),
    ):
        out += [
            Route(f"{base}/status", status, methods=["GET"]),
            Route(f"{base}/region/{{region}}/status", status, methods=["GET"]),
            Route(f"{base}/region/{{region}}/register", register, methods=["POST"]),
            Route(f"{base}/unregister", unregister, methods=["POST"]),
            Route(f"{base}/region/{{region}}/unregister", unregister, methods=["POST"]),
        ]
    out += [
        Route("/v2/trace/setting", trace_setting, methods=["GET", "POST"]),
        Route("/v2/models/{model}/trace/setting", trace_setting, methods=["GET", "POST"]),
        Route("/v2/logging", log_settings, methods=["GET", "POST"]),
    ]
    return out
