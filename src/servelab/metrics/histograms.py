"""Lock-protected fixed-bucket histograms that schedulers fill and the collector reads at scrape time.

Kept here, not as ``prometheus_client.Histogram`` objects, so that a model version owns its
histograms (they disappear with it) and no collector must be attached before a model loads.
Observing is one ``bisect`` and three additions under a lock; a model version's histograms share one lock,
so that what one execution observes in three of them takes it once (:meth:`ModelHistograms.observe_execution`).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from dataclasses import dataclass, field

__all__ = ["BATCH_BUCKETS", "LATENCY_BUCKETS_S", "Histogram", "ModelHistograms"]


def _latency_buckets() -> tuple[float, ...]:
    """1, 1.5, 2, 3, 5, 7.5 per decade from 50 us to 10 s: fine enough for P50/P90/P99 in PromQL."""
    steps = (1.0, 1.5, 2.0, 3.0, 5.0, 7.5)
    bounds = [m * 10.0**e for e in range(-5, 2) for m in steps]
    return tuple(round(b, 9) for b in bounds if 50e-6 <= b <= 10.0 + 1e-9)


#: Upper bounds (seconds) of the latency histograms; +Inf is implied.
LATENCY_BUCKETS_S: tuple[float, ...] = _latency_buckets()
#: Upper bounds of the executed-batch-size histogram.
BATCH_BUCKETS: tuple[float, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024)


class Histogram:
    """Cumulative-on-read histogram: per-bucket counts, sum and count."""

    def __init__(self, bounds: tuple[float, ...], lock: threading.Lock | None = None) -> None:
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._sum = 0.0
        self._lock = lock if lock is not None else threading.Lock()

    def observe(self, value: float) -> None:
        i = bisect_left(self.bounds, value)
        with self._lock:
            self._counts[i] += 1
            self._sum += value

    def _add(self, value: float) -> None:
        """:meth:`observe` for a caller that holds this histogram's lock."""
        self._counts[bisect_left(self.bounds, value)] += 1
        self._sum += value

    def snapshot(self) -> tuple[list[tuple[str, float]], float, int]:
        """(cumulative buckets as (le, count) with "+Inf" last, sum, count)."""
        with self._lock:
            counts = list(self._counts)
            total = self._sum
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip(self.bounds, counts, strict=False):
            running += n
            buckets.append((_le(bound), float(running)))
        running += counts[-1]
        buckets.append(("+Inf", float(running)))
        return buckets, total, running

    @property
    def count(self) -> int:
        with self._lock:
            return sum(self._counts)


def _le(bound: float) -> str:
    return repr(float(bound))


@dataclass
class ModelHistograms:
    """What one model version's scheduler observes: per request, per execution."""

    #: enqueue (or arrival) to answer, seconds, per request served by the scheduler
    request: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS_S))
    #: time spent waiting in the queue, seconds, per executed request
    queue: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS_S))
    #: one backend execution (input + infer + output), seconds
    compute: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS_S))
    #: inferences (rows) per backend execution
    batch_size: Histogram = field(default_factory=lambda: Histogram(BATCH_BUCKETS))

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        for h in (self.request, self.queue, self.compute, self.batch_size):
            h._lock = self._lock

    def observe_execution(
        self, compute_s: float, rows: int, queue_s: float | None = None, request_s: float | None = None
    ) -> None:
        """One execution's compute time and size, and (for one request run alone) its queue time and its
        whole time in the scheduler: the lock taken once for all four."""
        with self._lock:
            self.compute._add(compute_s)
            self.batch_size._add(rows)
            if queue_s is not None:
                self.queue._add(queue_s)
            if request_s is not None:
                self.request._add(request_s)
