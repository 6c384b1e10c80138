"""The HTTP port's hot route served in front of Starlette: ``POST /v2/models/{model}[/versions/{v}]/infer``.

Starlette's middleware stack and router (two exception middlewares, the route scan, the
``request_response`` wrapper) cost about a fifth of the server's CPU per small inference request. The
:class:`FastInfer` ASGI callable recognises the inference path and method with a few string checks and
runs the same endpoint (:func:`servelab.frontends.rest.oip.infer`: same body limits, decode, data plane
call, encode and headers) with the same door check (:func:`servelab.frontends.auth.check_scope` on the
route's own requirement) and the same error handlers (:func:`servelab.frontends.rest.errors.handled_error`).
Every other request, and any path the checks do not take as exactly one of the two templates, goes to the
Starlette app unchanged, so its router stays the one authority on every other route.
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from servelab.frontends.auth import Door, check_scope, route_requirement
from servelab.frontends.rest import oip
from servelab.frontends.rest.errors import handled_error

__all__ = ["INFER_TEMPLATES", "FastInfer", "infer_path_params"]

_PREFIX = "/v2/models/"
_SUFFIX = "/infer"
_PLAIN = "/v2/models/{model}/infer"
_VERSIONED = "/v2/models/{model}/versions/{version}/infer"
#: the Starlette path templates this front serves (oip.routes() declares the same two)
INFER_TEMPLATES = (_PLAIN, _VERSIONED)


def infer_path_params(path: str) -> dict[str, str] | None:
    """``{"model": ..., ["version": ...]}`` when ``path`` is one of the two inference templates, else None.

    The same matches as Starlette's ``{name}`` parameter (one non-empty segment without ``/``); anything
    else (a trailing slash, an empty segment, more segments) is left to the router and its answer.
    """
    if not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)):
        return None
    parts = path[len(_PREFIX) : -len(_SUFFIX)].split("/")
    if len(parts) == 1 and parts[0]:
        return {"model": parts[0]}
    if len(parts) == 3 and parts[1] == "versions" and parts[0] and parts[2]:
        return {"model": parts[0], "version": parts[2]}
    return None


class FastInfer:
    """ASGI app: the inference route served directly, everything else by ``app`` (the Starlette app)."""

    def __init__(self, app: Starlette, door: Door | None = None) -> None:
        self.app = app
        self._plain = route_requirement(door, "POST", _PLAIN)
        self._versioned = route_requirement(door, "POST", _VERSIONED)

    @property
    def state(self) -> Any:
        """The Starlette app's state (data plane, settings, shared memory), as ``create_app`` set it."""
        return self.app.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            params = infer_path_params(scope["path"])
            if params is not None:
                await self._infer(scope, receive, send, params)
                return
        await self.app(scope, receive, send)

    async def _infer(self, scope: Scope, receive: Receive, send: Send, params: dict[str, str]) -> None:
        scope["app"] = self.app  # what Starlette sets: the endpoint and the handlers read app.state
        scope["path_params"] = params
        request = Request(scope, receive, send)
        requirement = self._versioned if "version" in params else self._plain
        try:
            if requirement is not None:
                check_scope(requirement, scope)
            response = await oip.infer(request)
        except Exception as exc:  # what the app's exception middlewares would answer
            response = await handled_error(request, exc)
        await response(scope, receive, send)
