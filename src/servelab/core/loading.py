"""Builds one model version: its instances (threads or worker processes), warm-up, signature, scheduler.

Whether the instances run in threads or in worker processes is decided by the registry before any is
built; here each instance is loaded once (in its worker, for worker processes), all of a version's
workers load at once, and a failure at any step unloads whatever was built, so a failed load leaves
nothing running.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from servelab.backends.base import Backend, BackendContext
from servelab.core.records import LoadedVersion
from servelab.core.scheduling import Scheduler
from servelab.core.stats import ModelStats
from servelab.core.validation import Signature
from servelab.core.workers import WorkerPool
from servelab.protocol import model_config_pb2 as mc
from servelab.repository import ModelSource
from servelab.repository.warmup import run_warmup

__all__ = ["SchedulerFactory", "load_threads", "ready_version", "start_workers"]

#: Builds the scheduler for a loaded version: (instances, stats, config) -> Scheduler.
SchedulerFactory = Callable[[list[Backend], ModelStats, mc.ModelConfig], Scheduler]


def start_workers(pool: WorkerPool, cls: type[Backend], contexts: list[BackendContext]) -> list[Backend]:
    """One worker process per instance, all loading at once; any failure stops them all."""
    workers = [pool.instance(ctx, cls) for ctx in contexts]
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.load()
    except BaseException:
        for worker in workers:
            worker.close(0.0)
        raise
    return list(workers)


def load_threads(cls: type[Backend], contexts: list[BackendContext]) -> list[Backend]:
    """One backend per instance in this process, loaded in turn; any failure unloads those loaded."""
    instances: list[Backend] = []
    try:
        for ctx in contexts:
            backend = cls(ctx)
            backend.load()
            instances.append(backend)
    except BaseException:
        for b in instances:
            b.unload()
        raise
    return instances


def ready_version(
    source: ModelSource, version: int, instances: list[Backend], max_tensor_elements: int,
    scheduler_factory: SchedulerFactory,
) -> LoadedVersion:
    """Warm the loaded instances up, then put them behind the version's signature and scheduler; on any
    failure the instances unload."""
    config = source.config
    stats = ModelStats(source.name, version)
    try:
        run_warmup(instances, source.warmup, source.name)  # model_warmup: every instance, before ready
        signature = Signature(config, max_tensor_elements)
        scheduler = scheduler_factory(instances, stats, config)
    except BaseException:
        for b in instances:
            with contextlib.suppress(Exception):
                b.unload()
        raise
    return LoadedVersion(source.name, version, config, signature, instances, scheduler, stats)
