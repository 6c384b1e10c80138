"""The Ray Serve deployments: one per model running servelab's own server assembly, and the front one.

- :class:`ModelReplica`: every replica is servelab's data plane (repository -> registry -> batching ->
  backends, keys at the door) built by :class:`servelab.frontends.server.Server`, exactly as
  ``servelab serve`` builds it, and answers through servelab's REST app (``create_app``). Ray Serve's
  proxy routes ``/v2/models/<name>/...`` to the model's application by prefix, so an inference request
  makes one hop: proxy -> replica. Version routing happens inside each replica's data plane, so every
  replica applies the same policy, read from the same repository.
- :class:`FrontIngress` (application ``servelab`` at ``/``): what belongs to the whole server, answered
  over the model applications' handles: liveness, readiness (every model ready), server metadata and the
  repository index. Repository control is refused: a load through one replica would leave the others
  behind, so models change by redeploying.

This module imports Ray at the top; nothing of the server imports it (pyproject's import contracts).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from ray import serve
from ray.serve import Deployment
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from servelab.config.settings import ControlMode, ServerSettings
from servelab.deploy.plan import ModelPlan, route_prefix
from servelab.errors import NotFound, Unavailable, Unsupported
from servelab.frontends.auth import build_door, guard_routes
from servelab.frontends.rest.app import create_app
from servelab.frontends.rest.errors import install_error_handlers
from servelab.frontends.server import Server
from servelab.repository import config_from_json, config_to_dict
from servelab.repository.config import read_config

__all__ = ["FRONT_APP", "FRONT_DEPLOYMENT", "MODEL_DEPLOYMENT", "FrontIngress", "ModelReplica"]

#: name of the application that answers the server-wide routes
FRONT_APP = "servelab"

ASGIApp = Any


class _UnprefixedPath:
    """Ray Serve adds the matched route prefix to ``root_path``; servelab's routes are absolute paths."""

    def __init__(self, app: ASGIApp, prefix: str) -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        root = scope.get("root_path", "")
        if scope["type"] in ("http", "websocket") and root.endswith(self.prefix):
            scope = {**scope, "root_path": root[: -len(self.prefix)]}
        await self.app(scope, receive, send)


def _one_instance(plan: ModelPlan, settings: ServerSettings) -> str:
    """The model's config as JSON with every instance group cut to one instance (instances_as_replicas)."""
    for root in settings.model_repository:
        if (root / plan.name).is_dir():
            config, _ = read_config(root / plan.name)
            break
    else:
        raise NotFound(f"model '{plan.name}' is not in the model repository")
    for group in config.instance_group:
        group.count = 1
    del config.instance_group[1:]
    return orjson.dumps(config_to_dict(config)).decode()


@serve.ingress()
class ModelReplica:
    """One replica of one model: servelab's server assembly without its sockets (Ray owns those)."""

    def __init__(self, settings: ServerSettings, plan: ModelPlan) -> None:
        self.plan = plan
        self.settings = settings.model_copy(
            update={"model_control_mode": ControlMode.EXPLICIT, "load_models": list(plan.load)}
        )
        self.server = Server(self.settings)  # registry, data plane, metrics, keys: as `servelab serve`
        dataplane = self.server.dataplane
        if plan.single_instance:
            dataplane.startup(list(plan.load[:-1]))
            override = _one_instance(plan, self.settings)
            config_from_json(override, plan.name)  # a bad override fails here, naming the model
            dataplane.load_model(plan.name, override)
        else:
            dataplane.startup(list(plan.load))
        if not dataplane.model_ready(plan.name):
            record = self.server.registry.record(plan.name)
            dataplane.close()
            raise Unavailable(f"model '{plan.name}' did not load in its Ray replica: {record.reason}")

    def __serve_build_asgi_app__(self) -> ASGIApp:
        s = self.server
        app = create_app(s.dataplane, s.settings, s.metrics_registry, s.door)
        return _UnprefixedPath(app, self.plan.route_prefix)

    # ----- called by the front application and by Ray -----
    def ready(self) -> bool:
        return self.server.dataplane.model_ready(self.plan.name)

    def check_health(self) -> None:
        """Ray restarts a replica whose model is no longer ready."""
        if not self.ready():
            raise Unavailable(f"model '{self.plan.name}' is not ready in this replica")

    def repository_index(self) -> list[dict[str, str]]:
        return [row for row in self.server.dataplane.repository_index() if row.get("name") == self.plan.name]

    def server_metadata(self) -> dict[str, Any]:
        return self.server.dataplane.server_metadata()

    def replica_statistics(self) -> dict[str, Any]:
        """This replica's id and its statistics of the model (each replica counts only what it served)."""
        replica = serve.get_replica_context().replica_id.unique_id
        return {"replica": replica, "statistics": self.server.dataplane.statistics(self.plan.name)}

    def __del__(self) -> None:
        server = getattr(self, "server", None)
        if server is not None:
            server.dataplane.close()


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


@serve.ingress()
class FrontIngress:
    """The server-wide routes of the OIP, answered over every model application."""

    def __init__(self, settings: ServerSettings, models: list[str]) -> None:
        self.settings = settings
        self.models = list(models)
        self.door = build_door(settings)

    def __serve_build_asgi_app__(self) -> ASGIApp:
        routes: list[BaseRoute] = [
            Route("/v2/health/live", self._live, methods=["GET"]),
            Route("/v2/health/ready", self._ready, methods=["GET"]),
            Route("/v2", self._metadata, methods=["GET"]),
            Route("/v2/repository/index", self._index, methods=["POST"]),
            Route("/v2/repository/models/{model}/load", self._control, methods=["POST"]),
            Route("/v2/repository/models/{model}/unload", self._control, methods=["POST"]),
            Route("/v2/models/{model}", self._not_deployed, methods=["GET"]),
            Route("/v2/models/{model}/ready", self._not_deployed, methods=["GET"]),
            Route("/v2/models/{model}/infer", self._not_deployed, methods=["POST"]),
        ]
        app = Starlette(routes=guard_routes(routes, self.door))
        install_error_handlers(app)
        return app

    async def _each(self, method: str) -> list[Any]:
        calls = [getattr(serve.get_app_handle(m), method).remote() for m in self.models]
        return list(await asyncio.gather(*calls))

    async def _live(self, request: Request) -> Response:
        return Response(status_code=200)

    async def _ready(self, request: Request) -> Response:
        try:
            ready = all(await self._each("ready"))
        except Exception:  # a model application that is gone or restarting is not ready
            ready = False
        return Response(status_code=200 if ready else 503)

    async def _metadata(self, request: Request) -> Response:
        if not self.models:
            return _json({"name": "servelab", "version": "", "extensions": []})
        return _json(await serve.get_app_handle(self.models[0]).server_metadata.remote())

    async def _index(self, request: Request) -> Response:
        rows = [row for rows in await self._each("repository_index") for row in rows]
        return _json(sorted(rows, key=lambda r: (r["name"], r.get("version", ""))))

    async def _control(self, request: Request) -> Response:
        raise Unsupported(
            "repository control is off in a Ray deployment: a load or unload would reach one replica of many. "
            "Change the repository and run `servelab deploy ray` again"
        )

    async def _not_deployed(self, request: Request) -> Response:
        name = request.path_params["model"]
        raise NotFound(f"model '{name}' is not deployed; deployed: {sorted(self.models)} (at {route_prefix('<name>')})")


#: the Ray Serve deployments (options per model: :meth:`servelab.deploy.plan.ModelPlan.deployment_options`)
MODEL_DEPLOYMENT: Deployment = serve.deployment()(ModelReplica)
FRONT_DEPLOYMENT: Deployment = serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0})(FrontIngress)
