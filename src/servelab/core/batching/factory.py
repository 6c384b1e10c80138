"""Which scheduler a loaded version gets: the registry's default ``scheduler_factory``.

Lives in ``core.batching`` (the layer above ``core.scheduling``) so that every import points down:
batching builds on the instance layer's Scheduler, and the registry only calls this factory.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from servelab.backends.base import Backend
from servelab.core.batching.batcher import DynamicBatcher
from servelab.core.batching.sequence import SequenceBatcher
from servelab.core.cache import ResponseCache
from servelab.core.scheduling import DirectScheduler, Scheduler
from servelab.core.stats import ModelStats
from servelab.protocol import model_config_pb2 as mc

__all__ = ["make_scheduler", "scheduler_factory"]


def make_scheduler(
    instances: list[Backend],
    stats: ModelStats,
    config: mc.ModelConfig,
    *,
    cache: ResponseCache | None = None,
) -> Scheduler:
    """The scheduler a config asks for: SequenceBatcher with ``sequence_batching``, DynamicBatcher with
    ``dynamic_batching``, else DirectScheduler.

    ``instances`` are thread instances or worker processes (the registry decided, before building
    them). ``response_cache { enable: true }`` uses ``cache`` (the server's shared one) or, without
    one, a cache of this version alone.
    """
    if config.HasField("sequence_batching"):  # its files (initial_state/) lie in the model's folder
        return SequenceBatcher(instances, stats, config, model_dir=instances[0].ctx.version_dir.parent)
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
