"""Dynamic batching: per-model queue, batch forming, queue policies and priorities; and the factory
that gives each loaded version its scheduler."""

from servelab.core.batching._policy import DEFAULT_MAX_QUEUE_SIZE, BatchPolicy, QueuePolicy
from servelab.core.batching.batcher import DynamicBatcher
from servelab.core.batching.factory import make_scheduler, scheduler_factory

__all__ = [
    "DEFAULT_MAX_QUEUE_SIZE",
    "BatchPolicy",
    "DynamicBatcher",
    "QueuePolicy",
    "make_scheduler",
    "scheduler_factory",
]
