"""Dynamic and sequence batching: per-model queue, batch forming, queue policies and priorities, sequence
slots and implicit state; and the factory that gives each loaded version its scheduler."""

from servelab.core.batching._policy import DEFAULT_MAX_QUEUE_SIZE, BatchPolicy, QueuePolicy
from servelab.core.batching.batcher import DynamicBatcher
from servelab.core.batching.factory import make_scheduler, scheduler_factory
from servelab.core.batching.sequence import SequenceBatcher

__all__ = [
    "DEFAULT_MAX_QUEUE_SIZE",
    "BatchPolicy",
    "DynamicBatcher",
    "QueuePolicy",
    "SequenceBatcher",
    "make_scheduler",
    "scheduler_factory",
]
