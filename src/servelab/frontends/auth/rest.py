"""The REST side of the door: each protected route's ASGI app is wrapped by a check; open routes are not.

:func:`guard_routes` runs once per app at start. A refused request raises Starlette's ``HTTPException``
inside the app, so the app's own error handlers answer it in that port's shape (``{"error": ...}`` for
OIP / TF Serving, TorchServe's ``{"code", "type", "message"}`` on the management port and
``/predictions``): 401 with ``WWW-Authenticate: Bearer`` for a missing or wrong key, 403 with Triton's
message for a restricted API without its header.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from servelab.frontends.auth.door import Denial, Door, Requirement
from servelab.frontends.auth.routes import UnclassifiedRoute, rest_group

__all__ = ["check_scope", "guard_routes", "http_exception", "route_requirement"]

_REALM = 'Bearer realm="servelab"'


def guard_routes(routes: list[BaseRoute], door: Door | None) -> list[BaseRoute]:
    """``routes`` with every protected one checked first; unchanged when the door checks nothing over HTTP."""
    if door is None or not door.http:
        return routes
    for route in routes:
        requirement = _requirement(route, door)
        if requirement is not None:
            assert isinstance(route, Route)
            route.app = _guarded(route.app, requirement)
    return routes


def _requirement(route: BaseRoute, door: Door) -> Requirement | None:
    if not isinstance(route, Route):
        raise UnclassifiedRoute(f"{route!r} is not a plain Route: the auth table cannot classify it")
    methods = sorted(route.methods or {"GET"})
    groups = {rest_group(method, route.path) for method in methods}
    if len(groups) != 1:
        raise UnclassifiedRoute(f"{route.path}: its methods {methods} fall in different API groups")
    return route_requirement(door, methods[0], route.path)


def route_requirement(door: Door | None, method: str, path: str) -> Requirement | None:
    """What the route ``method path`` (a Starlette path template) requires; ``None``: nothing to check.

    Also for handlers served in front of the router (:mod:`servelab.frontends.rest.fast_infer`), so that
    they are guarded by the same table and the same check as the route they stand for.
    """
    if door is None or not door.http:
        return None
    group = rest_group(method, path)
    return door.http.get(group) if group is not None else None


def check_scope(requirement: Requirement, scope: Scope) -> None:
    """Raise the refusal (:func:`http_exception`) when the request in ``scope`` does not meet ``requirement``."""
    denial = requirement.check(Headers(scope=scope).get)
    if denial is not None:
        raise http_exception(denial)


def _guarded(app: ASGIApp, requirement: Requirement) -> ASGIApp:
    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        check_scope(requirement, scope)
        await app(scope, receive, send)

    return guarded


def http_exception(denial: Denial) -> HTTPException:
    """401 + ``WWW-Authenticate`` for a key, 403 for a Triton restricted API (what Triton answers)."""
    if denial.restricted:
        return HTTPException(403, denial.message)
    challenge = _REALM + (', error="invalid_token"' if denial.invalid_token else "")
    return HTTPException(401, denial.message, headers={"WWW-Authenticate": challenge})
