"""Which scheduler a loaded version gets: the registry's default ``scheduler_factory``.

Lives in ``core.batching`` (the layer above ``core.scheduling``) so that every import points down:
batching builds on the instance layer's Scheduler, and the registry only calls this factory.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from servelab.backends.base import Backend, param
from servelab.core.batching.batcher import DynamicBatcher
from servelab.core.cache import ResponseCache
from servelab.core.scheduling import DirectScheduler, Scheduler, to_processes
from servelab.core.stats import ModelStats
from servelab.protocol import model_config_pb2 as mc

__all__ = ["make_scheduler", "scheduler_factory", "wants_processes"]


def wants_processes(instances: list[Backend], config: mc.ModelConfig) -> bool:
    """Worker processes for GIL-holding runtimes; ``instance_mode`` thread|process|auto overrides."""
    mode = (param(config, "instance_mode", "auto") or "auto").strip().lower()
    if mode not in ("auto", "thread", "process"):
        raise ValueError(f"parameter 'instance_mode' must be auto, thread or process; got {mode!r}")
    if mode == "thread":
        return False
    return mode == "process" or not instances[0].releases_gil


def make_scheduler(
    instances: list[Backend],
    stats: ModelStats,
    config: mc.ModelConfig,
    *,
    cache: ResponseCache | None = None,
) -> Scheduler:
    """The scheduler a config asks for: DynamicBatcher with ``dynamic_batching``, else DirectScheduler.

    GIL-holding backends (or ``parameters { key: "instance_mode" value { string_value: "process" } }``)
    move each instance into a worker process; the list ``instances`` is updated in place with the
    process proxies, so unloading the version stops the workers. ``response_cache { enable: true }``
    uses ``cache`` (the server's shared one) or, without one, a cache of this version alone.
    """
    if wants_processes(instances, config):
        to_processes(instances)
    use_cache: ResponseCache | None = None
    if config.response_cache.enable:
        use_cache = cache if cache is not None else ResponseCache()
    if config.HasField("dynamic_batching"):
        return DynamicBatcher(instances, stats, config, cache=use_cache)
    return DirectScheduler(instances, stats, cache=use_cache)


def scheduler_factory(
    cache: ResponseCache | None = None,
) -> Callable[[list[Backend], ModelStats, mc.ModelConfig], Scheduler]:
    """A registry ``scheduler_factory`` whose versions share one server-wide response cache."""
    return partial(make_scheduler, cache=cache)
