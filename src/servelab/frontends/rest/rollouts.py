"""Rollout control over REST, on the HTTP port beside the model's OIP routes (management key):

- ``GET  /v2/models/{m}/rollout``: the model's routing and rollout status (default version, labels,
  split, per-variant counts, shadow comparison, the rollout's step, share, gates, history)
- ``POST /v2/models/{m}/rollout``: start one; the body is a :class:`~servelab.core.routing.RolloutSpec`
  as JSON (``{"candidate": "2", "steps": [5, 20, 100], ...}``)
- ``POST /v2/models/{m}/rollout/{action}``: ``pause``, ``resume``, ``abort``, ``promote``

Each answers the status document. The work (sqlite, gate quantiles) runs in a worker thread.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from servelab.frontends.rest._body import read_body
from servelab.frontends.rest._common import dataplane, in_thread, json_response, settings
from servelab.frontends.rest._oip_codec import parse_json_object

__all__ = ["ROLLOUT", "routes"]

ROLLOUT = "/v2/models/{model}/rollout"


async def status(request: Request) -> Response:
    return json_response(await in_thread(dataplane(request).rollout_status, request.path_params["model"]))


async def start(request: Request) -> Response:
    body = await read_body(request, settings(request).limits.max_body_bytes)
    spec = parse_json_object(body, "rollout start request")
    return json_response(await in_thread(dataplane(request).start_rollout, request.path_params["model"], spec))


async def act(request: Request) -> Response:
    params = request.path_params
    return json_response(await in_thread(dataplane(request).rollout_action, params["model"], params["action"]))


def routes() -> list[BaseRoute]:
    return [
        Route(ROLLOUT, status, methods=["GET"]),
        Route(ROLLOUT, start, methods=["POST"]),
        Route(ROLLOUT + "/{action}", act, methods=["POST"]),
    ]
