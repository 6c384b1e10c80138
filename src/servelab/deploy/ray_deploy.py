"""``servelab deploy ray``: put every model of a repository on a Ray cluster as a Ray Serve application.

The driver reads the repository once (:mod:`servelab.deploy.plan`), resolves the keys once (a key file
is read, or generated, here, so that every replica holds the same keys), checks the exposure rule of
``servelab serve`` (beyond loopback, a management key), then runs one application per model plus the
front application and waits until all of them are RUNNING. Ray Serve's HTTP proxy listens on
``settings.host:settings.http_port``.

The repository's path must be the same on every node of the cluster (a shared volume), as a Triton
fleet's would be; on one machine that holds by itself.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import ray
from pydantic import SecretStr
from ray import serve

from servelab.config.settings import ModelDeploySettings, ServerSettings
from servelab.deploy.plan import ModelPlan, plan_repository
from servelab.deploy.ray_app import FRONT_APP, FRONT_DEPLOYMENT, MODEL_DEPLOYMENT
from servelab.frontends.auth import build_door, load_keys

__all__ = ["RayDeployment", "deploy", "resolve_keys", "scale", "shutdown"]

log = logging.getLogger("servelab.deploy")

#: no access log line per request (as `servelab serve`); Ray's own warnings and errors stay
_LOGGING = {"log_level": "WARNING", "enable_access_log": False}


@dataclass(frozen=True)
class RayDeployment:
    """What :func:`deploy` put on the cluster."""

    plans: tuple[ModelPlan, ...]
    http_url: str

    @property
    def models(self) -> list[str]:
        return [p.name for p in self.plans]


def resolve_keys(settings: ServerSettings) -> ServerSettings:
    """The settings with the key file's keys inlined, so replicas on other nodes need no file."""
    if settings.auth.key_file is None:
        return settings
    keys = load_keys(settings.auth)
    auth = settings.auth.model_copy(
        update={
            "key_file": None,
            "management_key": SecretStr(keys.management) if keys.management else None,
            "inference_key": SecretStr(keys.inference) if keys.inference else None,
        }
    )
    return settings.model_copy(update={"auth": auth})


def _model_app(plan: ModelPlan, settings: ServerSettings) -> Any:
    return MODEL_DEPLOYMENT.options(**plan.deployment_options()).bind(settings, plan)


def _connect(address: str | None, init_options: dict[str, Any] | None) -> None:
    if not ray.is_initialized():
        ray.init(address=address, **(init_options or {}))


def deploy(
    settings: ServerSettings,
    *,
    address: str | None = None,
    models: list[str] | None = None,
    init_options: dict[str, Any] | None = None,
) -> RayDeployment:
    """Deploy ``models`` (default: all) of ``settings.model_repository`` and wait until they serve.

    ``address`` is Ray's (``auto``, ``ray://host:10001``; None starts a local Ray); ``init_options``
    go to ``ray.init`` when this call starts or joins Ray. Raises ``AuthSetupError`` for the exposure
    rule and ``ServelabError`` for a repository that cannot be planned, before anything is deployed.
    """
    plans = plan_repository(list(settings.model_repository), settings.deploy, models)
    settings = resolve_keys(settings)
    build_door(settings)  # the exposure rule of `servelab serve`, before anything starts
    _connect(address, init_options)
    serve.start(http_options={"host": settings.host, "port": settings.http_port}, logging_config=_LOGGING)
    targets = [
        serve.RunTarget(_model_app(p, settings), name=p.name, route_prefix=p.route_prefix, logging_config=_LOGGING)
        for p in plans
    ]
    front = FRONT_DEPLOYMENT.bind(settings, [p.name for p in plans])
    targets.append(serve.RunTarget(front, name=FRONT_APP, route_prefix="/", logging_config=_LOGGING))
    serve.run_many(targets)
    url = f"http://{settings.host}:{settings.http_port}"
    log.info("deployed %d model(s) on Ray Serve at %s: %s", len(plans), url, ", ".join(p.name for p in plans))
    return RayDeployment(tuple(plans), url)


def scale(settings: ServerSettings, model: str, num_replicas: int) -> ModelPlan:
    """Redeploy one model's application with ``num_replicas`` replicas (Ray Serve updates it in place)."""
    own = settings.deploy.models.get(model, ModelDeploySettings())
    models = {**settings.deploy.models, model: own.model_copy(update={"num_replicas": num_replicas, "autoscaling": None})}
    settings = settings.model_copy(update={"deploy": settings.deploy.model_copy(update={"models": models})})
    (plan,) = plan_repository(list(settings.model_repository), settings.deploy, [model])
    serve.run(_model_app(plan, resolve_keys(settings)), name=plan.name, route_prefix=plan.route_prefix,
              logging_config=_LOGGING)
    return plan


def shutdown() -> None:
    """Delete every servelab application and stop Serve (Ray itself stays up if it was joined)."""
    serve.shutdown()
