"""Starlette applications: the HTTP port (OIP, TF Serving, TorchServe inference, /metrics), the
TorchServe management port and the metrics port."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from servelab.config.settings import ServerSettings
from servelab.core.dataplane import DataPlane
from servelab.frontends.auth import Door, guard_routes
from servelab.frontends.rest import oip, rollouts, tfserving, torchserve, torchserve_management
from servelab.frontends.rest.errors import install_error_handlers

__all__ = ["create_app", "create_management_app", "create_metrics_app"]


def _metrics_route(registry: CollectorRegistry) -> BaseRoute:
    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

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
) -> Starlette:
    """The HTTP port; ``door`` (keys, restricted APIs) guards the routes that need it."""
    for ext in oip.EXTENSIONS:
        if ext not in dataplane.extensions:
            dataplane.extensions.append(ext)
    routes = [*oip.routes(), *rollouts.routes(), *tfserving.routes(), *torchserve.routes(),
              _metrics_route(metrics_registry)]
    return _app(routes, dataplane, settings, door=door)


def create_management_app(dataplane: DataPlane, settings: ServerSettings, door: Door | None = None) -> Starlette:
    routes = torchserve_management.routes()
    return _app(routes, dataplane, settings, torchserve_errors=True, door=door)


def create_metrics_app(metrics_registry: CollectorRegistry, door: Door | None = None) -> Starlette:
    app = Starlette(routes=guard_routes([_metrics_route(metrics_registry)], door))
    install_error_handlers(app)
    return app
