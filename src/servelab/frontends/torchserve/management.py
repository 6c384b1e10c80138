"""TorchServe's management API over the data plane (its REST port and its gRPC ManagementAPIsService).

List, describe, register, scale, set-default and unregister, answered with TorchServe's own objects and
messages. Models come from the model repository: with a TorchServe model store, ``register url=x.mar``
loads that archive of the store (a file name only: no URL is fetched, nothing outside the store is
read, :mod:`servelab.repository.torchserve_archive`); with a Triton-layout repository ``url`` is the
model's folder name (``name`` or ``name.mar``). "Workers" are instances: a count reloads the model
with that many, at most ``workers.max_workers_per_model``. Registering and unregistering need
``enable_model_api`` when a TorchServe store is served (TorchServe 0.12's default is off).
"""

from __future__ import annotations

import asyncio
import datetime
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format

from servelab.config.settings import ServerSettings
from servelab.core.dataplane import DataPlane
from servelab.errors import AlreadyExists, InvalidArgument, NotFound, ServelabError, Unsupported
from servelab.frontends.torchserve.calls import ModelView, model_view
from servelab.protocol import model_config_pb2 as mc
from servelab.repository.torchserve import TorchServeRepository
from servelab.trust import check_model_name

__all__ = ["Management", "ModelApiDisabled"]

_STARTED = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


class ModelApiDisabled(Unsupported):
    """TorchServe's answer to register / unregister while the model API is off (REST 405)."""

    http_status = 405

    def __init__(self) -> None:
        super().__init__("Requested method is not allowed, please refer to API document.")


def _instances(config: mc.ModelConfig) -> int:
    return sum(g.count or 1 for g in config.instance_group) or 1


@dataclass
class Management:
    """TorchServe's management calls on one server's data plane (default versions live in its router)."""

    dp: DataPlane
    settings: ServerSettings

    @property
    def store(self) -> TorchServeRepository | None:
        repository = self.dp.registry.repository
        return repository if isinstance(repository, TorchServeRepository) else None

    @property
    def model_api(self) -> bool:
        return self.store is None or self.settings.torchserve.enable_model_api

    # ----- reading -----
    def registered(self) -> list[str]:
        return sorted({r["name"] for r in self.dp.repository_index() if r["state"] == "READY"})

    def require_registered(self, name: str) -> None:
        check_model_name(name)
        if name not in self.registered():
            raise NotFound(f"Model not found: {name}")

    def list_models(self, limit: int, start: int) -> dict[str, Any]:
        limit = limit if 0 < limit <= 100 else 100
        names = self.registered()
        start = max(0, start)
        body: dict[str, Any] = {}
        if start + limit < len(names):
            body["nextPageToken"] = str(start + limit)
        body["models"] = [{"modelName": n, "modelUrl": self._url(n)} for n in names[start : start + limit]]
        return body

    def describe(self, name: str, version: str) -> list[dict[str, Any]]:
        self.require_registered(name)
        if version == "all":
            meta = self.dp.model_metadata(name)
            view = model_view(self.dp, name, "")
            shown = [view.params.torchserve_version(int(v)) for v in meta["versions"]] if view.params.version_numbers else meta["versions"]
            return [self._describe_one(model_view(self.dp, name, v)) for v in shown]
        return [self._describe_one(model_view(self.dp, name, version))]

    def _url(self, name: str) -> str:
        try:
            view = model_view(self.dp, name, "")
        except ServelabError:
            return name
        return view.params.urls.get(view.torchserve_version, name)

    def _describe_one(self, view: ModelView) -> dict[str, Any]:
        config = self.dp.model_config(view.name, view.version)
        meta = self.dp.model_metadata(view.name, view.version)
        workers = _instances(config)
        delay_us = config.dynamic_batching.max_queue_delay_microseconds if config.HasField("dynamic_batching") else 0
        if not delay_us and view.params.max_batch_delay_ms is not None:
            delay_us = view.params.max_batch_delay_ms * 1000
        default = model_view(self.dp, view.name, "")
        version = view.torchserve_version
        return {
            "modelName": view.name,
            "modelVersion": version,
            "modelUrl": view.params.urls.get(version, view.name),
            "engine": meta["platform"],
            "runtime": "python",
            "minWorkers": workers,
            "maxWorkers": max(workers, view.params.max_workers or workers),
            "batchSize": max(1, config.max_batch_size),
            "maxBatchDelay": delay_us // 1000,
            "responseTimeout": view.params.response_timeout_s or int(self.settings.limits.request_timeout_s),
            "isDefaultVersion": version == default.torchserve_version,
            "workers": [
                {"id": str(9000 + i), "startTime": _STARTED, "status": "READY", "memoryUsage": 0, "pid": -1,
                 "gpu": False, "gpuUsage": "N/A"}
                for i in range(workers)
            ],
            "jobQueueStatus": {"remainingCapacity": 1000, "pendingRequests": 0},
        }

    # ----- changing -----
    def _check_cap(self, key: str, workers: int) -> None:
        cap = self.settings.workers.max_workers_per_model
        if workers > cap:
            raise InvalidArgument(
                f"{key}={workers} is more than the {cap} workers a model may have "
                "(settings workers.max_workers_per_model)"
            )

    async def _reload(self, name: str, workers: int | None, batch_size: int = 0, delay_ms: int | None = None) -> None:
        config = mc.ModelConfig()
        config.CopyFrom(self.dp.model_config(name))
        if workers:
            kind = config.instance_group[0].kind if config.instance_group else mc.ModelInstanceGroup.KIND_CPU
            del config.instance_group[:]
            config.instance_group.add(count=workers, kind=kind)
        if batch_size > 0:
            config.max_batch_size = batch_size
            if batch_size > 1:
                config.dynamic_batching.max_queue_delay_microseconds = (delay_ms if delay_ms is not None else 100) * 1000
        await asyncio.to_thread(self.dp.load_model, name, json_format.MessageToJson(config))

    def register_name(self, url: str | None, model_name: str | None) -> str:
        """The model that ``url`` names; ``model_name`` must agree."""
        if not url:
            raise InvalidArgument("Parameter url is required.")
        store = self.store
        if store is not None:
            name = store.model_for_url(url)
        else:
            name = url.removesuffix(".mar")
            if "/" in name or "://" in url:
                raise InvalidArgument(
                    f"register: url {url!r} is not a model name; servelab fetches no archives or URLs and registers "
                    "models of its repository by folder name (e.g. url=my_model or url=my_model.mar)"
                )
            check_model_name(name, "register: url")
        if model_name:
            check_model_name(model_name, "register: model_name")
            if model_name != name:
                what = "model" if store is not None else "model folder"
                raise InvalidArgument(
                    f"register: model_name {model_name!r} differs from the {what} {name!r} that url names; "
                    "a model is served under the name its archive (or folder) gives"
                )
        return name

    async def register(
        self, url: str | None, model_name: str | None, initial_workers: int, batch_size: int = 0,
        max_batch_delay_ms: int | None = None,
    ) -> str:
        if not self.model_api:
            raise ModelApiDisabled()
        name = self.register_name(url, model_name)
        self._check_cap("initial_workers", initial_workers)
        if name in self.registered():
            raise AlreadyExists(f"Model {name} is already registered.")
        await asyncio.to_thread(self.dp.load_model, name, None)
        config = self.dp.model_config(name)
        if (initial_workers and initial_workers != _instances(config)) or batch_size > 0:
            await self._reload(name, initial_workers or None, batch_size, max_batch_delay_ms)
        count = _instances(self.dp.model_config(name))
        version = model_view(self.dp, name, "").torchserve_version
        return f'Model "{name}" Version: {version} registered with {count} initial workers'

    async def scale(self, name: str, version: str, min_worker: int | None, max_worker: int | None) -> str:
        self.require_registered(name)
        view = model_view(self.dp, name, version)
        workers = min_worker if min_worker is not None else max_worker
        key = "min_worker" if min_worker is not None else "max_worker"
        if not workers:
            raise InvalidArgument("scale: give min_worker (an integer >= 1)")
        if max_worker is not None and min_worker is not None and max_worker < min_worker:
            raise InvalidArgument("max_worker cannot be less than min_worker.")
        self._check_cap(key, workers)
        await self._reload(name, workers)
        message = f"Workers scaled to {workers} for model: {name}"
        return message + (f", version: {view.torchserve_version}" if version else "")

    def set_default(self, name: str, version: str) -> str:
        self.require_registered(name)
        view = model_view(self.dp, name, version)
        self.dp.set_default_version(name, view.version)  # the router pins it (and persists it, with a state file)
        return f'Default version successfully updated for model "{name}" to "{version}"'

    async def unregister(self, name: str, version: str) -> str:
        if not self.model_api:
            raise ModelApiDisabled()
        self.require_registered(name)
        model_view(self.dp, name, version)  # NotFound for an unknown version
        await asyncio.to_thread(self.dp.set_default_version, name, None)  # a pinned default goes with the model
        await asyncio.to_thread(self.dp.unload_model, name, False)
        return f'Model "{name}" unregistered'
