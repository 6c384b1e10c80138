"""What each model of a repository needs from a cluster: replicas, autoscaling, resources, companions.

Pure and Ray-free, so that ``servelab deploy ray`` and the tests share one reading of the repository.
Every model becomes one Ray Serve application with one deployment; its replicas run servelab's own
data plane with the model and the models it calls in-process (an ensemble's steps, transitively),
so ensembles and version routing behave as under ``servelab serve``.

Sizing, first match wins: ``deploy.models.<m>`` (autoscaling, then num_replicas); with
``deploy.instances_as_replicas`` the model's instance_group count (one instance per replica);
``deploy.num_replicas``. A replica reserves ``cpus_per_instance`` logical CPUs per KIND_CPU instance it
runs and one GPU per KIND_GPU instance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.config.settings import DeploySettings, ModelDeploySettings
from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc
from servelab.repository import ModelRepository
from servelab.repository.config import read_config

__all__ = ["ModelPlan", "plan_model", "plan_repository", "route_prefix"]

#: Ray Serve routes by URL prefix: names outside this set would need quoting in every client's URL
_URL_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
#: fewest requests a replica takes at once (Ray's default of 5 would starve the dynamic batcher)
_MIN_ONGOING = 16


@dataclass(frozen=True)
class ModelPlan:
    """One model's Ray Serve application."""

    name: str
    #: what the replica loads: the model's ensemble steps (transitively), then the model
    load: tuple[str, ...]
    num_replicas: int
    max_ongoing_requests: int
    num_cpus: float
    num_gpus: float
    #: Ray Serve ``autoscaling_config`` (None: a fixed ``num_replicas``)
    autoscaling: dict[str, Any] | None = None
    #: the replica runs the model with one instance (``deploy.instances_as_replicas``)
    single_instance: bool = False

    @property
    def route_prefix(self) -> str:
        return route_prefix(self.name)

    def deployment_options(self) -> dict[str, Any]:
        """Keyword arguments of Ray Serve's ``Deployment.options``."""
        options: dict[str, Any] = {
            "name": self.name,
            "max_ongoing_requests": self.max_ongoing_requests,
            "ray_actor_options": {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus},
        }
        if self.autoscaling is not None:
            options["autoscaling_config"] = dict(self.autoscaling)
        else:
            options["num_replicas"] = self.num_replicas
        return options


def route_prefix(model: str) -> str:
    """The URL prefix Ray Serve routes to ``model``'s application: its OIP model routes."""
    return f"/v2/models/{model}"


def _instances(config: mc.ModelConfig) -> tuple[int, int]:
    """(CPU instances, GPU instances) of a config; no instance_group is one CPU instance, as in servelab."""
    cpu = gpu = 0
    for group in config.instance_group:
        count = group.count or 1
        if group.kind == mc.ModelInstanceGroup.KIND_GPU:
            gpu += count * max(1, len(group.gpus))
        else:
            cpu += count
    return (cpu, gpu) if cpu or gpu else (1, 0)


def _steps(repo: ModelRepository, name: str, seen: tuple[str, ...] = ()) -> list[str]:
    """The models an ensemble calls, steps of steps first, each once."""
    if name in seen:
        raise InvalidArgument(f"ensemble '{name}' calls itself through {' -> '.join((*seen, name))}")
    config, _ = read_config(repo.model_dir(name))
    out: list[str] = []
    for step in config.ensemble_scheduling.step:
        for dep in [*_steps(repo, step.model_name, (*seen, name)), step.model_name]:
            if dep not in out:
                out.append(dep)
    return out


def _check_name(name: str) -> None:
    bad = sorted(set(name) - _URL_SAFE)
    if bad:
        raise InvalidArgument(
            f"model '{name}': Ray Serve routes by URL prefix, so a deployed model's name must be letters, digits, "
            f"'-', '_' or '.'; it contains {bad}. Rename its folder."
        )


def _sizing(config: mc.ModelConfig, own: ModelDeploySettings, settings: DeploySettings) -> tuple[int, bool]:
    """(replicas, one instance per replica)."""
    cpu, gpu = _instances(config)
    if own.num_replicas is not None:
        return own.num_replicas, False
    if settings.instances_as_replicas:
        return cpu + gpu, True
    return settings.num_replicas, False


def plan_model(repo: ModelRepository, name: str, settings: DeploySettings) -> ModelPlan:
    """The plan of one model (errors name the model and what to change)."""
    _check_name(name)
    config, _ = read_config(repo.model_dir(name))
    own = settings.models.get(name, ModelDeploySettings())
    replicas, single = _sizing(config, own, settings)
    cpu, gpu = (1, 0) if single else _instances(config)
    if single and _instances(config)[1]:
        cpu, gpu = 0, 1
    batch = max(1, config.max_batch_size)
    per_replica = cpu + gpu
    autoscaling: dict[str, Any] | None = None
    if own.autoscaling is not None:
        a = own.autoscaling
        target = a.target_ongoing_requests or float(batch * per_replica)
        autoscaling = {
            "min_replicas": a.min_replicas,
            "max_replicas": a.max_replicas,
            "initial_replicas": max(1, a.min_replicas),
            "target_ongoing_requests": target,
        }
    max_ongoing = own.max_ongoing_requests or max(_MIN_ONGOING, 2 * batch * per_replica)
    steps = tuple(_steps(repo, name))
    return ModelPlan(
        name=name,
        load=(*steps, name),
        num_replicas=replicas,
        max_ongoing_requests=max_ongoing,
        num_cpus=cpu * settings.cpus_per_instance,
        num_gpus=float(gpu),
        autoscaling=autoscaling,
        single_instance=single,
    )


def plan_repository(
    roots: list[Path], settings: DeploySettings, models: list[str] | None = None
) -> list[ModelPlan]:
    """Plans for ``models`` (default: every model of the repository), in the repository's order."""
    repo = ModelRepository(list(roots))
    names = models if models else repo.model_names()
    unknown = sorted(set(settings.models) - set(repo.model_names()))
    if unknown:
        raise InvalidArgument(f"deploy.models names {unknown}, which are not in the repository {repo.model_names()}")
    return [plan_model(repo, name, settings) for name in names]
