"""TorchServe's management API (its own port): list, describe, register, scale, set-default, unregister.

The operations are :class:`servelab.frontends.torchserve.management.Management`'s (shared with the
management gRPC service); this module reads TorchServe's query parameters and writes its JSON
(Gson's layout). Errors are TorchServe's ``{"code": int, "type": str, "message": str}``.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from servelab.errors import InvalidArgument
from servelab.frontends.rest._common import dataplane, settings
from servelab.frontends.torchserve.management import Management
from servelab.frontends.torchserve.wire import rest_json

__all__ = ["routes"]

_JSON = "application/json"


def _json(value: Any) -> Response:
    return Response(rest_json(value), media_type=_JSON)


def _status(message: str) -> Response:
    return _json({"status": message})


def _management(request: Request) -> Management:
    return Management(dataplane(request), settings(request))


def _int_query(request: Request, key: str, default: int | None) -> int | None:
    raw = request.query_params.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgument(f"query parameter {key}={raw!r} must be an integer") from None
    if value < 0:
        raise InvalidArgument(f"query parameter {key} must be >= 0; got {value}")
    return value


async def list_models(request: Request) -> Response:
    limit = _int_query(request, "limit", 100) or 100
    start = _int_query(request, "next_page_token", 0) or 0
    return _json(_management(request).list_models(limit, start))


async def describe(request: Request) -> Response:
    return _json(_management(request).describe(request.path_params["model"], request.path_params.get("version", "")))


async def register(request: Request) -> Response:
    q = request.query_params
    message = await _management(request).register(
        q.get("url"), q.get("model_name"), _int_query(request, "initial_workers", 0) or 0,
        _int_query(request, "batch_size", 0) or 0, _int_query(request, "max_batch_delay", None),
    )  # fmt: skip
    return _status(message)


async def scale(request: Request) -> Response:
    p = request.path_params
    message = await _management(request).scale(
        p["model"], p.get("version", ""), _int_query(request, "min_worker", None), _int_query(request, "max_worker", None)
    )
    return _status(message)


async def set_default(request: Request) -> Response:
    return _status(_management(request).set_default(request.path_params["model"], request.path_params["version"]))


async def unregister(request: Request) -> Response:
    p = request.path_params
    return _status(await _management(request).unregister(p["model"], p.get("version", "")))


async def api_description(request: Request) -> Response:
    return _json({"openapi": "3.0.1", "info": {"title": "servelab TorchServe-compatible management API"}})


def routes() -> list[BaseRoute]:
    return [
        Route("/", api_description, methods=["OPTIONS"]),
        Route("/models", list_models, methods=["GET"]),
        Route("/models", register, methods=["POST"]),
        Route("/models/{model}", describe, methods=["GET"]),
        Route("/models/{model}", scale, methods=["PUT"]),
        Route("/models/{model}", unregister, methods=["DELETE"]),
        Route("/models/{model}/{version}", describe, methods=["GET"]),
        Route("/models/{model}/{version}", scale, methods=["PUT"]),
        Route("/models/{model}/{version}", unregister, methods=["DELETE"]),
        Route("/models/{model}/{version}/set-default", set_default, methods=["PUT"]),
    ]
