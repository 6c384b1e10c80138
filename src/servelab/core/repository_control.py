"""The data plane's statistics and repository control (Triton's statistics and model-repository extensions):
what a front-end asks besides inference, and what several server processes must agree on
(``DataPlane.siblings``, frontends.process_group).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from servelab.core.model_views import version_stats
from servelab.core.registry import ModelRegistry
from servelab.core.routing import Router
from servelab.core.stats import merge_statistics
from servelab.errors import InvalidArgument
from servelab.repository import config_from_json

__all__ = ["RepositoryControl", "Siblings"]


class Siblings(Protocol):
    """The other processes of the same server (frontends.process_group): what one process is asked for
    statistics or control, it gathers from or passes on to them."""

    def gather(self, op: str, **args: Any) -> list[Any]: ...

    def broadcast(self, op: str, **args: Any) -> None: ...


class RepositoryControl:
    """Statistics, the repository index, load and unload; :class:`servelab.core.dataplane.DataPlane` is one."""

    registry: ModelRegistry
    router: Router
    #: set when this process is one of several on the same ports (``--processes``)
    siblings: Siblings | None

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """Triton's statistics extension; backends with stages of their own add ``stages``. With sibling
        processes, every process's counters summed."""
        local = self.local_statistics(name, version)
        if self.siblings is None:
            return local
        others = self.siblings.gather("statistics", name=name, version=version)
        return {"model_stats": merge_statistics([local["model_stats"], *(o["model_stats"] for o in others)])}

    def local_statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """This process's statistics only."""
        if name and version:
            versions = [self.router.resolve(name, version)]
        elif name:
            versions = [lv for _, lv in sorted(self.registry.record(name).versions.items())]
        else:
            versions = [lv for r in self.registry.records() for _, lv in sorted(r.versions.items())]
        return {"model_stats": [version_stats(lv) for lv in versions]}

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        rows = self.registry.index()
        return [r for r in rows if r["state"] == "READY"] if ready_only else rows

    def load_model(
        self, name: str, config_json: str | None = None, files: Mapping[str, bytes] | None = None
    ) -> None:
        """Load or reload ``name``; ``config_json`` overrides config.pbtxt, ``files`` (the load request's
        ``file:<path>`` contents) become its folder (Triton's repository extension). With sibling
        processes, each of them loads it too once this one has."""
        self.local_load_model(name, config_json, files)
        if self.siblings is not None:
            self.siblings.broadcast("load", name=name, config_json=config_json, files=files)

    def local_load_model(
        self, name: str, config_json: str | None = None, files: Mapping[str, bytes] | None = None
    ) -> None:
        try:
            override = config_from_json(config_json, name) if config_json else None
        except InvalidArgument as exc:  # Triton's wording, which clients match on
            raise InvalidArgument(f"failed to load '{name}', {exc.message}") from None
        self.registry.load(name, override, files=files)

    def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Unload ``name``; with ``unload_dependents`` an ensemble's step models go too (Triton's extension)."""
        self.local_unload_model(name, unload_dependents)
        if self.siblings is not None:
            self.siblings.broadcast("unload", name=name, unload_dependents=unload_dependents)

    def local_unload_model(self, name: str, unload_dependents: bool = False) -> None:
        record = self.registry.record(name) if unload_dependents else None
        steps: list[str] = []
        if record is not None and record.config is not None and record.config.HasField("ensemble_scheduling"):
            steps = [s.model_name for s in record.config.ensemble_scheduling.step]
        self.registry.unload(name)
        for step in dict.fromkeys(steps):
            self.registry.unload(step)
