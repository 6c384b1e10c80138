"""TorchServe's management API (its own port): list, describe, register, scale, set-default, unregister.

Models are registered from the model repository by name (``url`` is the folder name there, with or
without ``.mar``; no URL is fetched, and ``model_name`` may only repeat that name); "workers"
are instances: ``initial_workers`` / ``min_worker`` reload the model with that many instances, at most
``workers.max_workers_per_model`` (settings) so that no request can start an unbounded number of
processes.
Errors are TorchServe's ``{"code": int, "type": str, "message": str}``.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from servelab.errors import AlreadyExists, InvalidArgument, NotFound
from servelab.frontends.rest._common import dataplane, in_thread, json_response, settings
from servelab.protocol import model_config_pb2 as mc
from servelab.trust import check_model_name

__all__ = ["routes"]


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


def _registered(request: Request) -> list[str]:
    return sorted({r["name"] for r in dataplane(request).repository_index() if r["state"] == "READY"})


def _require_registered(request: Request, name: str) -> None:
    """TorchServe answers 404 for a model that is not registered, not 503: unloaded is "not found" here.

    A name that breaks the naming rule is refused first (400), like on every other route."""
    check_model_name(name)
    if name not in _registered(request):
        raise NotFound(f"Model not found: {name}")


async def list_models(request: Request) -> Response:
    limit = _int_query(request, "limit", 100) or 100
    start = _int_query(request, "next_page_token", 0) or 0
    names = _registered(request)
    page = names[start : start + limit]
    body: dict[str, Any] = {"models": [{"modelName": n, "modelUrl": n} for n in page]}
    if start + limit < len(names):
        body["nextPageToken"] = str(start + limit)
    return json_response(body)


def _instances(config: mc.ModelConfig) -> int:
    return sum(g.count or 1 for g in config.instance_group) or 1


def _describe_one(request: Request, name: str, version: str) -> dict[str, Any]:
    dp = dataplane(request)
    config = dp.model_config(name, version)
    meta = dp.model_metadata(name, version)
    workers = _instances(config)
    delay_us = config.dynamic_batching.max_queue_delay_microseconds if config.HasField("dynamic_batching") else 0
    default = dp.resolve_version(name)  # the router's default: set-default's pin, else the policy's or newest
    return {
        "modelName": name,
        "modelVersion": version or default,
        "modelUrl": name,
        "engine": meta["platform"],
        "runtime": "python",
        "minWorkers": workers,
        "maxWorkers": workers,
        "batchSize": max(1, config.max_batch_size),
        "maxBatchDelay": delay_us // 1000,
        "isDefaultVersion": (version or default) == default,
        "workers": [
            {"id": str(i), "status": "READY", "gpu": False, "memoryUsage": 0} for i in range(workers)
        ],
        "jobQueueStatus": {"remainingCapacity": 1000, "pendingRequests": 0},
    }


async def describe(request: Request) -> Response:
    name = request.path_params["model"]
    _require_registered(request, name)
    version = request.path_params.get("version", "")
    if version == "all":
        versions = dataplane(request).model_metadata(name)["versions"]
        return json_response([_describe_one(request, name, v) for v in versions])
    return json_response([_describe_one(request, name, version)])


def _check_cap(request: Request, key: str, workers: int) -> None:
    cap = settings(request).workers.max_workers_per_model
    if workers > cap:
        raise InvalidArgument(
            f"{key}={workers} is more than the {cap} workers a model may have "
            "(settings workers.max_workers_per_model)"
        )


async def _reload_with_workers(request: Request, name: str, workers: int) -> None:
    dp = dataplane(request)
    config = mc.ModelConfig()
    config.CopyFrom(dp.model_config(name))
    kind = config.instance_group[0].kind if config.instance_group else mc.ModelInstanceGroup.KIND_CPU
    del config.instance_group[:]
    config.instance_group.add(count=workers, kind=kind)
    await in_thread(dp.load_model, name, json_format.MessageToJson(config))


def _register_name(url: str | None, model_name: str | None) -> str:
    """The repository folder that ``url`` names (``name`` or ``name.mar``); ``model_name`` must agree."""
    if not url:
        raise InvalidArgument("register: the 'url' query parameter must name a model in the repository")
    folder = url.removesuffix(".mar")
    if "/" in folder:
        raise InvalidArgument(
            f"register: url {url!r} is not a model name; servelab fetches no archives or URLs and registers "
            "models of its repository by folder name (e.g. url=my_model or url=my_model.mar)"
        )
    check_model_name(folder, "register: url")
    if model_name:
        check_model_name(model_name, "register: model_name")
        if model_name != folder:
            raise InvalidArgument(
                f"register: model_name {model_name!r} differs from the model folder {folder!r} that url names; "
                "a model is served under its folder name"
            )
    return folder


async def register(request: Request) -> Response:
    name = _register_name(request.query_params.get("url"), request.query_params.get("model_name"))
    workers = _int_query(request, "initial_workers", 0) or 0
    _check_cap(request, "initial_workers", workers)
    if name in _registered(request):
        raise AlreadyExists(f"Model {name} is already registered.")
    dp = dataplane(request)
    await in_thread(dp.load_model, name, None)
    if workers and workers != _instances(dp.model_config(name)):
        await _reload_with_workers(request, name, workers)
    count = _instances(dp.model_config(name))
    version = dp.resolve_version(name)
    return json_response({"status": f'Model "{name}" Version: {version} registered with {count} initial workers'})


async def scale(request: Request) -> Response:
    name = request.path_params["model"]
    _require_registered(request, name)
    if request.path_params.get("version"):
        dataplane(request).model_metadata(name, request.path_params["version"])
    key = "min_worker"
    workers = _int_query(request, key, None)
    if workers is None:
        key = "max_worker"
        workers = _int_query(request, key, None)
    if not workers:
        raise InvalidArgument("scale: give min_worker (an integer >= 1)")
    _check_cap(request, key, workers)
    await _reload_with_workers(request, name, workers)
    return json_response({"status": f"Workers scaled to {workers} for model: {name}"})


async def set_default(request: Request) -> Response:
    name, version = request.path_params["model"], request.path_params["version"]
    _require_registered(request, name)
    dp = dataplane(request)
    meta = dp.model_metadata(name, version)
    if version not in meta["versions"] and version not in dp.labels(name):
        raise NotFound(f"Model version {version} does not exist for model {name}")
    await in_thread(dp.set_default_version, name, version)  # the router persists it (sqlite)
    return json_response({"status": f'Default version successfully updated for model "{name}" to "{version}"'})


async def unregister(request: Request) -> Response:
    name = request.path_params["model"]
    version = request.path_params.get("version", "")
    dp = dataplane(request)
    _require_registered(request, name)
    dp.model_metadata(name, version)  # NotFound for an unknown version
    await in_thread(dp.set_default_version, name, None)  # a pinned default goes with the model
    await in_thread(dp.unload_model, name, False)
    return json_response({"status": f'Model "{name}" unregistered'})


async def api_description(request: Request) -> Response:
    return json_response({"openapi": "3.0.1", "info": {"title": "servelab TorchServe-compatible management API"}})


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
