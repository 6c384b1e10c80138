"""Starlette applications: the HTTP port (OIP, TF Serving, TorchServe inference, /metrics), the
TorchServe management port and the metrics port."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from servelab.config.settings import ServerSettings
from servelab.core.dataplane import DataPlane
from servelab.frontends.auth import Door, guard_routes
from servelab.frontends.rest import (
    oip,
    oip_extensions,
    rollouts,
    tfserving,
    torchserve,
    torchserve_management,
)
from servelab.frontends.rest.errors import install_error_handlers
from servelab.frontends.rest.fast_infer import FastInfer
from servelab.frontends.shared_memory import SharedMemory
from servelab.metrics import render

__all__ = ["create_app", "create_management_app", "create_metrics_app"]


def _metrics_route(registry: CollectorRegistry) -> BaseRoute:
    async def metrics(request: Request) -> Response:
        body, media_type = render(registry)
        return Response(body, media_type=media_type)

    return Route("/metrics", metrics, methods=["GET"])


def _app(
    routes: list[BaseRoute],
    dataplane: DataPlane,
    settings: ServerSettings,
    torchserve_errors: bool = False,
    door: Door | None = None,
) -> Starlette:
    app = Starlette(routes=guard_routes(routes, door))
    app.state.dataplane = dataplane
    app.state.settings = settings
    install_error_handlers(app, torchserve=torchserve_errors)
    return app


def create_app(
    dataplane: DataPlane,
    settings: ServerSettings,
    metrics_registry: CollectorRegistry,
    door: Door | None = None,
    shared_memory: SharedMemory | None = None,
) -> FastInfer:
    """The HTTP port; ``door`` (keys, restricted APIs) guards the routes that need it; ``shared_memory`` holds
    the regions clients register (the server's, shared with its gRPC port; a new one if not given). The
    inference route is served in front of the Starlette app (:mod:`.fast_infer`), the rest by it."""
    shared_memory = shared_memory if shared_memory is not None else SharedMemory()
    for ext in (*oip.EXTENSIONS, *shared_memory.extensions()):
        if ext not in dataplane.extensions:
            dataplane.extensions.append(ext)
    routes = [
        *oip.routes(), *oip_extensions.routes(), *rollouts.routes(), *tfserving.routes(), *torchserve.routes(),
        _metrics_route(metrics_registry),
    ]
    app = _app(routes, dataplane, settings, door=door)
    app.state.shared_memory = shared_memory
    return FastInfer(app, door)


def create_management_app(dataplane: DataPlane, settings: ServerSettings, door: Door | None = None) -> Starlette:
    routes = torchserve_management.routes()
    return _app(routes, dataplane, settings, torchserve_errors=True, door=door)


def create_metrics_app(metrics_registry: CollectorRegistry, door: Door | None = None) -> Starlette:
    app = Starlette(routes=guard_routes([_metrics_route(metrics_registry)], door))
    install_error_handlers(app)
    return app
