"""Open Inference Protocol REST routes with Triton's extensions (binary data, config, repository, stats;
shared memory, trace and logging are in :mod:`.oip_extensions`)."""

from __future__ import annotations

import base64
import binascii
from time import perf_counter_ns
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from servelab.config.limits import LimitSettings
from servelab.core.dataplane import DataPlane
from servelab.core.routing import HeaderLookup
from servelab.errors import InvalidArgument
from servelab.frontends.rest._body import off_loop_if_large, read_body
from servelab.frontends.rest._common import (
    dataplane,
    in_thread,
    json_response,
    model_and_version,
    settings,
    shared_memory,
)
from servelab.frontends.rest._oip_codec import decode_body, encode_infer, parse_json_object, raw_request
from servelab.frontends.shared_memory import SharedMemory
from servelab.frontends.trace_logging import LOGGING_EXTENSION
from servelab.repository import FILE_PREFIX, config_to_dict

__all__ = ["EXTENSIONS", "answer_infer", "routes"]

#: extensions this front-end adds to the data plane's list (and the shared-memory ones: ``create_app``)
EXTENSIONS = ("binary_tensor_data", LOGGING_EXTENSION)
_HEADER_LENGTH = "inference-header-content-length"


async def live(request: Request) -> Response:
    return Response(status_code=200 if dataplane(request).live() else 503)


async def ready(request: Request) -> Response:
    return Response(status_code=200 if dataplane(request).ready() else 503)


async def server_metadata(request: Request) -> Response:
    return json_response(dataplane(request).server_metadata())


async def model_metadata(request: Request) -> Response:
    name, version = model_and_version(request)
    return json_response(dataplane(request).model_metadata(name, version))


async def model_ready(request: Request) -> Response:
    name, version = model_and_version(request)
    dp = dataplane(request)
    if dp.model_ready(name, version):
        return Response(status_code=200)
    dp.model_metadata(name, version)  # raises NotFound / Unavailable naming the reason
    return Response(status_code=503)


async def model_config(request: Request) -> Response:
    name, version = model_and_version(request)
    return json_response(config_to_dict(dataplane(request).model_config(name, version)))


async def model_stats(request: Request) -> Response:
    name = request.path_params.get("model", "")
    version = request.path_params.get("version", "")
    dp = dataplane(request)  # with sibling processes the figures come over their sockets: not on the loop
    stats = await in_thread(dp.statistics, name, version) if dp.siblings is not None else dp.statistics(name, version)
    return json_response(stats)


async def infer(request: Request) -> Response:
    name, version = model_and_version(request)
    limits = settings(request).limits
    body = await read_body(request, limits.max_body_bytes)
    payload, json_length = await answer_infer(
        dataplane(request), limits, shared_memory(request), body,
        request.headers.get(_HEADER_LENGTH), name, version, request.headers,
    )  # fmt: skip
    if json_length is None:
        return Response(payload, media_type="application/json")
    return Response(
        payload,
        media_type="application/octet-stream",
        headers={"Inference-Header-Content-Length": str(json_length)},
    )


async def answer_infer(
    dp: DataPlane, limits: LimitSettings, regions: SharedMemory, body: bytes | bytearray, header_length: str | None,
    name: str, version: str, headers: HeaderLookup,
) -> tuple[bytes, int | None]:
    """An inference body's answer: (payload, JSON header length or None when every output is JSON).

    Decode (a raw binary request when the header length is 0), the data plane call (``headers``: a routing
    policy's sticky key), encode, the wire statistics; a large body's decode and encode off the loop."""
    t0 = perf_counter_ns()
    if header_length is not None and header_length.strip() == "0":
        metadata = dp.model_metadata(name, version)
        decoded = await off_loop_if_large(
            len(body), limits.offload_decode_bytes, raw_request, body, metadata, name, version, limits
        )
    else:
        decoded = await off_loop_if_large(
            len(body), limits.offload_decode_bytes, decode_body, body, header_length, name, version, limits, regions
        )
    t1 = perf_counter_ns()
    response = await dp.infer_async(decoded.request, headers)
    t2 = perf_counter_ns()
    size = sum(t.data.nbytes for t in response.outputs)
    payload, json_length = await off_loop_if_large(
        size, limits.offload_decode_bytes, encode_infer, response, decoded, regions
    )
    dp.record_wire(response, t1 - t0, perf_counter_ns() - t2)
    return payload, json_length


async def _optional_object(request: Request, what: str) -> dict[str, Any]:
    body = await read_body(request, settings(request).limits.max_body_bytes)
    if not body.strip():
        return {}
    return parse_json_object(body, what)


async def repository_index(request: Request) -> Response:
    body = await _optional_object(request, "repository index request")
    ready_only = body.get("ready", False)
    if not isinstance(ready_only, bool):
        raise InvalidArgument("repository index: 'ready' must be true or false")
    return json_response(dataplane(request).repository_index(ready_only))


def _load_parameters(body: dict[str, Any]) -> dict[str, Any]:
    params = body.get("parameters", {})
    if not isinstance(params, dict):
        raise InvalidArgument("'parameters' must be an object")
    return params


def _load_files(params: dict[str, Any]) -> dict[str, bytes]:
    """The ``file:<path>`` parameters (base64 text) as path -> content; the paths are checked where the
    files are written (:mod:`servelab.repository.uploads`)."""
    files: dict[str, bytes] = {}
    for key, value in params.items():
        if not key.startswith(FILE_PREFIX):
            continue
        if not isinstance(value, str):
            raise InvalidArgument(f"model load: parameters[{key!r}] must be a string holding the file in base64")
        try:
            files[key.removeprefix(FILE_PREFIX)] = base64.b64decode(value, validate=True)
        except binascii.Error:
            raise InvalidArgument(f"model load: parameters[{key!r}] is not valid base64") from None
    return files


async def repository_load(request: Request) -> Response:
    name = request.path_params["model"]
    params = _load_parameters(await _optional_object(request, "model load request"))
    config = params.get("config")
    if config is not None and not isinstance(config, str):
        raise InvalidArgument("model load: parameters.config must be a string holding the ModelConfig as JSON")
    files = await in_thread(_load_files, params)  # large bodies: decode off the event loop
    await in_thread(dataplane(request).load_model, name, config, files or None)
    return Response(status_code=200)


async def repository_unload(request: Request) -> Response:
    name = request.path_params["model"]
    params = _load_parameters(await _optional_object(request, "model unload request"))
    dependents = params.get("unload_dependents", False)
    if not isinstance(dependents, bool):
        raise InvalidArgument("model unload: parameters.unload_dependents must be true or false")
    await in_thread(dataplane(request).unload_model, name, dependents)
    return Response(status_code=200)


def _model_routes(suffix: str, endpoint: Any, methods: list[str]) -> list[BaseRoute]:
    return [
        Route(f"/v2/models/{{model}}/versions/{{version}}{suffix}", endpoint, methods=methods),
        Route(f"/v2/models/{{model}}{suffix}", endpoint, methods=methods),
    ]


def routes() -> list[BaseRoute]:
    out: list[BaseRoute] = [
        Route("/v2/health/live", live, methods=["GET"]),
        Route("/v2/health/ready", ready, methods=["GET"]),
        Route("/v2", server_metadata, methods=["GET"]),
        Route("/v2/", server_metadata, methods=["GET"]),
        Route("/v2/models/stats", model_stats, methods=["GET"]),
        Route("/v2/repository/index", repository_index, methods=["POST"]),
        Route("/v2/repository/models/{model}/load", repository_load, methods=["POST"]),
        Route("/v2/repository/models/{model}/unload", repository_unload, methods=["POST"]),
    ]
    out += _model_routes("/infer", infer, ["POST"])
    out += _model_routes("/ready", model_ready, ["GET"])
    out += _model_routes("/config", model_config, ["GET"])
    out += _model_routes("/stats", model_stats, ["GET"])
    out += _model_routes("", model_metadata, ["GET"])
    return out
