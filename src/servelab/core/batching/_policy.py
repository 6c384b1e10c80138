"""The dynamic batcher's settings, read once from a ModelConfig's ``dynamic_batching`` block."""

from __future__ import annotations

from dataclasses import dataclass

from servelab.protocol import model_config_pb2 as mc

__all__ = ["DEFAULT_MAX_QUEUE_SIZE", "BatchPolicy", "QueuePolicy"]

#: Queue bound per priority level when the config says 0 (Triton: unbounded). 4096 requests of a few
#: KiB each keep memory in the tens of MiB while absorbing any burst a 2-core host can answer.
DEFAULT_MAX_QUEUE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """Triton's ModelQueuePolicy for one priority level."""

    #: True: a request whose timeout passes while queued is rejected (Unavailable); False: DELAY,
    #: it is served after every request of its level that has not timed out.
    reject: bool = True
    default_timeout_ns: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE

    @classmethod
    def from_proto(cls, p: mc.ModelQueuePolicy) -> QueuePolicy:
        return cls(
            reject=p.timeout_action != mc.ModelQueuePolicy.DELAY,
            default_timeout_ns=p.default_timeout_microseconds * 1000,
            allow_timeout_override=p.allow_timeout_override,
            max_queue_size=p.max_queue_size or DEFAULT_MAX_QUEUE_SIZE,
        )

    def timeout_ns(self, requested_us: int | None) -> int:
        """The queue timeout of one request: the default, or a shorter one it asked for when allowed."""
        if requested_us is None or requested_us <= 0 or not self.allow_timeout_override:
            return self.default_timeout_ns
        requested = requested_us * 1000
        return min(requested, self.default_timeout_ns) if self.default_timeout_ns else requested


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """Everything the batcher needs from the config, validated."""

    #: rows per execution; 1 when the model does not batch (each request runs alone)
    max_batch_size: int
    batched: bool
    #: sorted ascending; empty = only max_batch_size counts as "full"
    preferred: tuple[int, ...]
    max_delay_ns: int
    preserve_ordering: bool
    #: number of priority levels (>= 1); level 1 is served first
    levels: int
    default_level: int
    queues: tuple[QueuePolicy, ...]

    @property
    def target(self) -> int:
        """The batch size at which waiting stops at once: the largest preferred size, else the maximum."""
        return self.preferred[-1] if self.preferred else self.max_batch_size

    def level_of(self, priority: int | None) -> int:
        """Triton's rule: priority 0 or above the levels falls back to the default level."""
        if priority is None or priority <= 0 or priority > self.levels:
            return self.default_level
        return priority

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> BatchPolicy:
        db = config.dynamic_batching
        batched = config.max_batch_size > 0
        max_batch = config.max_batch_size if batched else 1
        preferred = tuple(sorted({p for p in db.preferred_batch_size if 0 < p <= max_batch}))
        bad = [p for p in db.preferred_batch_size if p <= 0 or p > max_batch]
        if bad:
            raise ValueError(
                f"model '{config.name}': dynamic_batching.preferred_batch_size {bad} must lie in "
                f"1..max_batch_size ({config.max_batch_size})"
            )
        levels = max(1, db.priority_levels)
        default_level = db.default_priority_level or (levels if db.priority_levels else 1)
        if default_level > levels:
            raise ValueError(
                f"model '{config.name}': dynamic_batching.default_priority_level {default_level} exceeds "
                f"priority_levels ({db.priority_levels})"
            )
        base = QueuePolicy.from_proto(db.default_queue_policy) if db.HasField("default_queue_policy") else QueuePolicy()
        queues = tuple(
            QueuePolicy.from_proto(db.priority_queue_policy[lvl]) if lvl in db.priority_queue_policy else base
            for lvl in range(1, levels + 1)
        )
        return cls(
            max_batch_size=max_batch,
            batched=batched,
            preferred=preferred,
            max_delay_ns=db.max_queue_delay_microseconds * 1000,
            preserve_ordering=db.preserve_ordering,
            levels=levels,
            default_level=default_level,
            queues=queues,
        )
