"""What the gates and the status read: live counts per variant, and comparisons of two versions' outputs.

A :class:`SideWindow` is one variant during one rollout step (requests, server errors, serve times);
each serve time is kept with the monotonic time it was recorded, so the P99 gate compares two variants over
the same span (both saw the same load); a :class:`Comparison` is the same inputs run by two versions (difference distribution, top-1
agreement, both latencies, copies that failed or were shed). Both are filled from any thread (the
event loop, shadow threads, ensemble steps) under a small lock and read by the evaluator a few times
a second; serve times are the time in the model's scheduler (queue + compute), the same measure for
live requests and shadow copies.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Comparison", "SideSnapshot", "SideWindow", "compare_outputs", "percentile_ms"]


def percentile_ms(samples_s: list[float], q: float) -> float | None:
    """The ``q`` percentile of serve times in milliseconds; None without samples."""
    if not samples_s:
        return None
    return float(np.percentile(np.asarray(samples_s), q)) * 1e3


@dataclass(frozen=True)
class SideSnapshot:
    requests: int
    errors: int
    latencies_s: list[float]
    #: ``time.monotonic()`` when each of ``latencies_s`` was recorded (same order, oldest first)
    times_s: list[float] = field(default_factory=list)

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def p99_ms(self) -> float | None:
        return percentile_ms(self.latencies_s, 99)

    @property
    def first_s(self) -> float | None:
        return self.times_s[0] if self.times_s else None

    def since(self, start_s: float) -> SideSnapshot:
        """The serve times recorded at or after ``start_s`` (counts unchanged)."""
        i = bisect.bisect_left(self.times_s, start_s)
        return SideSnapshot(self.requests, self.errors, self.latencies_s[i:], self.times_s[i:])


class SideWindow:
    """One variant's requests, server errors and serve times (the newest ``capacity`` of them)."""

    def __init__(self, capacity: int) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.errors = 0
        self._latencies: deque[float] = deque(maxlen=capacity)
        self._times: deque[float] = deque(maxlen=capacity)

    def record(self, ok: bool, serve_s: float | None) -> None:
        with self._lock:
            self.requests += 1
            if not ok:
                self.errors += 1
            elif serve_s is not None:
                self._latencies.append(serve_s)
                self._times.append(time.monotonic())

    def add_latency(self, serve_s: float) -> None:
        """A serve time that is not a live request of this variant (a shadow copy it answered)."""
        with self._lock:
            self._latencies.append(serve_s)
            self._times.append(time.monotonic())

    def snapshot(self) -> SideSnapshot:
        with self._lock:
            return SideSnapshot(self.requests, self.errors, list(self._latencies), list(self._times))


def _max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return math.inf
    if a.dtype == object or b.dtype == object or a.dtype.kind in "SU" or b.dtype.kind in "SU":
        return 0.0 if np.array_equal(a, b) else math.inf
    if a.size == 0:
        return 0.0
    x, y = a.astype(np.float64, copy=False), b.astype(np.float64, copy=False)
    diff = np.abs(x - y)
    both_nan = np.isnan(x) & np.isnan(y)
    if both_nan.any():
        diff = np.where(both_nan, 0.0, diff)
    worst = float(np.max(diff))
    return math.inf if math.isnan(worst) else worst


def _top1(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """(rows whose argmax agrees, rows) over the last axis; non-numeric outputs compare whole rows."""
    if a.shape != b.shape or a.size == 0:
        return 0, max(1, a.shape[0] if a.ndim > 1 else 1)
    if a.dtype == object or a.dtype.kind in "SU":
        return (1, 1) if np.array_equal(a, b) else (0, 1)
    if a.ndim < 2:
        return int(np.argmax(a) == np.argmax(b)), 1
    rows_a = a.reshape(a.shape[0], -1)
    rows_b = b.reshape(b.shape[0], -1)
    agree = np.argmax(rows_a, axis=1) == np.argmax(rows_b, axis=1)
    return int(agree.sum()), int(agree.size)


def compare_outputs(reference: Mapping[str, np.ndarray], other: Mapping[str, np.ndarray]) -> tuple[float, int, int]:
    """(largest absolute difference, rows whose top-1 agrees, rows) of two answers to the same request.

    An output the other side lacks, or of another shape, is an infinite difference and no agreement.
    """
    worst, agree, rows = 0.0, 0, 0
    for name, a in reference.items():
        b = other.get(name)
        if b is None:
            return math.inf, 0, max(1, rows)
        worst = max(worst, _max_abs_diff(np.asarray(a), np.asarray(b)))
        ok, n = _top1(np.asarray(a), np.asarray(b))
        agree, rows = agree + ok, rows + n
    return worst, agree, rows


class Comparison:
    """Two versions on the same inputs: ``reference`` (the one the client was answered by, or stable)
    against ``other``; the newest ``capacity`` differences and latencies are kept for quantiles."""

    def __init__(self, reference: str, other: str, capacity: int) -> None:
        self.reference = reference
        self.other = other
        self._lock = threading.Lock()
        self.compared = 0
        self.failed = 0
        self.shed = 0
        self.max_diff = 0.0
        self.agree_rows = 0
        self.rows = 0
        self._diffs: deque[float] = deque(maxlen=capacity)
        self._reference_s: deque[float] = deque(maxlen=capacity)
        self._other_s: deque[float] = deque(maxlen=capacity)

    def record(self, diff: float, agree: int, rows: int, reference_s: float, other_s: float) -> None:
        with self._lock:
            self.compared += 1
            self.max_diff = max(self.max_diff, diff)
            self.agree_rows += agree
            self.rows += rows
            self._diffs.append(diff)
            self._reference_s.append(reference_s)
            self._other_s.append(other_s)

    def record_failure(self) -> None:
        with self._lock:
            self.failed += 1

    def record_shed(self) -> None:
        with self._lock:
            self.shed += 1

    @property
    def top1_agreement(self) -> float | None:
        return self.agree_rows / self.rows if self.rows else None

    def summary(self) -> dict[str, Any]:
        """What the API, the CLI and the metrics show of this comparison."""
        with self._lock:
            diffs, ref, other = list(self._diffs), list(self._reference_s), list(self._other_s)
            counts = {"compared": self.compared, "failed": self.failed, "shed": self.shed}
            worst, agreement = self.max_diff, self.top1_agreement
        finite = [d for d in diffs if math.isfinite(d)]
        quantiles = {f"p{q}": float(np.percentile(finite, q)) for q in (50, 90, 99)} if finite else {}
        return {
            "reference": self.reference, "other": self.other, **counts,
            "abs_diff": {**quantiles, "max": worst if math.isfinite(worst) else "inf",
                         "mismatched_shape": len(diffs) - len(finite)},
            "top1_agreement": agreement,
            "latency_ms": {
                self.reference: {"p50": percentile_ms(ref, 50), "p99": percentile_ms(ref, 99)},
                self.other: {"p50": percentile_ms(other, 50), "p99": percentile_ms(other, 99)},
            },
        }
