"""Latency histograms and window statistics.

``LatencyHistogram`` uses logarithmic buckets (ratio ``1 + 2 * precision``) between 1 us and 1000 s, so
any reported percentile lies within ``precision`` (default 1%) of a recorded value of the same rank.
Histograms with the same layout merge by adding counts, and serialise to a small dict so that worker
processes can send them to the coordinator.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["PERCENTILES", "LatencyHistogram", "WindowStats"]

PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)
_LOWEST_S = 1e-6
_HIGHEST_S = 1e3


class LatencyHistogram:
    """A mergeable latency histogram (seconds in, seconds out) with bounded relative error."""

    __slots__ = ("_counts", "_inv_log_ratio", "_ratio", "count", "max_s", "min_s", "precision", "sum_s")

    def __init__(self, precision: float = 0.01) -> None:
        if not 0.0 < precision <= 0.1:
            raise ValueError(f"precision must be in (0, 0.1], got {precision}")
        self.precision = precision
        self._ratio = 1.0 + 2.0 * precision
        self._inv_log_ratio = 1.0 / math.log(self._ratio)
        n_buckets = math.ceil(math.log(_HIGHEST_S / _LOWEST_S) * self._inv_log_ratio) + 1
        self._counts = np.zeros(n_buckets, dtype=np.int64)
        self.count = 0
        self.sum_s = 0.0
        self.min_s = math.inf
        self.max_s = 0.0

    def _index(self, value_s: float) -> int:
        if value_s <= _LOWEST_S:
            return 0
        return min(int(math.log(value_s / _LOWEST_S) * self._inv_log_ratio), len(self._counts) - 1)

    def record(self, value_s: float) -> None:
        """Add one latency in seconds (negative values count as zero)."""
        value_s = max(value_s, 0.0)
        self._counts[self._index(value_s)] += 1
        self.count += 1
        self.sum_s += value_s
        self.min_s = min(self.min_s, value_s)
        self.max_s = max(self.max_s, value_s)

    def record_many(self, values_s: np.ndarray) -> None:
        """Add many latencies at once (vectorised)."""
        v = np.maximum(np.asarray(values_s, dtype=np.float64).ravel(), 0.0)
        if v.size == 0:
            return
        idx = np.floor(np.log(np.maximum(v, _LOWEST_S) / _LOWEST_S) * self._inv_log_ratio).astype(np.int64)
        np.clip(idx, 0, len(self._counts) - 1, out=idx)
        self._counts += np.bincount(idx, minlength=len(self._counts))
        self.count += int(v.size)
        self.sum_s += float(v.sum())
        self.min_s = min(self.min_s, float(v.min()))
        self.max_s = max(self.max_s, float(v.max()))

    def merge(self, other: LatencyHistogram) -> None:
        """Add another histogram's counts into this one (layouts must match)."""
        if other.precision != self.precision:
            raise ValueError(f"cannot merge histograms of precision {other.precision} and {self.precision}")
        self._counts += other._counts
        self.count += other.count
        self.sum_s += other.sum_s
        self.min_s = min(self.min_s, other.min_s)
        self.max_s = max(self.max_s, other.max_s)

    def _bucket_value(self, index: int) -> float:
        if index == 0 and self.min_s < _LOWEST_S:
            return self.min_s  # below the resolution: report the smallest value seen
        if index == len(self._counts) - 1:
            return self.max_s  # overflow bucket: report the largest value seen
        lo = _LOWEST_S * self._ratio**index
        return lo * math.sqrt(self._ratio)  # geometric middle: within `precision` of any value inside

    def percentile(self, q: float) -> float:
        """The nearest-rank ``q``-th percentile (0 < q <= 100) in seconds; NaN when empty."""
        if not 0.0 < q <= 100.0:
            raise ValueError(f"percentile must be in (0, 100], got {q}")
        if self.count == 0:
            return math.nan
        rank = max(1, math.ceil(round(q * self.count / 100.0, 9)))  # round: 99.9% of 1e5 is 99,900
        index = int(np.searchsorted(np.cumsum(self._counts), rank))
        return min(max(self._bucket_value(index), self.min_s), self.max_s)

    def mean(self) -> float:
        return self.sum_s / self.count if self.count else math.nan

    def cdf(self) -> tuple[np.ndarray, np.ndarray]:
        """(latency_s, cumulative fraction) points of the non-empty buckets, for plotting."""
        nz = np.nonzero(self._counts)[0]
        if nz.size == 0:
            return np.empty(0), np.empty(0)
        values = np.array([min(max(self._bucket_value(int(i)), self.min_s), self.max_s) for i in nz])
        return values, np.cumsum(self._counts[nz]) / self.count

    def to_dict(self) -> dict[str, Any]:
        nz = np.nonzero(self._counts)[0]
        return {
            "precision": self.precision,
            "buckets": {int(i): int(self._counts[i]) for i in nz},
            "count": self.count,
            "sum_s": self.sum_s,
            "min_s": self.min_s if self.count else None,
            "max_s": self.max_s,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LatencyHistogram:
        hist = cls(float(data["precision"]))
        for i, c in data["buckets"].items():
            hist._counts[int(i)] = int(c)
        hist.count = int(data["count"])
        hist.sum_s = float(data["sum_s"])
        hist.min_s = math.inf if data["min_s"] is None else float(data["min_s"])
        hist.max_s = float(data["max_s"])
        return hist


@dataclass(slots=True)
class WindowStats:
    """What one measurement window (possibly merged over workers) saw."""

    duration_s: float
    histogram: LatencyHistogram = field(default_factory=LatencyHistogram)
    errors: Counter[str] = field(default_factory=Counter)
    batch_size: int = 1

    @property
    def completed(self) -> int:
        return self.histogram.count

    @property
    def requests_per_s(self) -> float:
        return self.completed / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def inferences_per_s(self) -> float:
        return self.requests_per_s * self.batch_size

    def merge_concurrent(self, other: WindowStats) -> None:
        """Merge the same window from another worker: durations overlap, so rates add."""
        rate = self.requests_per_s + other.requests_per_s
        self.histogram.merge(other.histogram)
        self.errors.update(other.errors)
        self.duration_s = self.completed / rate if rate > 0 else max(self.duration_s, other.duration_s)

    def merge_sequential(self, other: WindowStats) -> None:
        """Append a later window: durations add."""
        self.histogram.merge(other.histogram)
        self.errors.update(other.errors)
        self.duration_s += other.duration_s

    def percentiles_ms(self) -> dict[str, float]:
        return {f"p{q:g}": self.histogram.percentile(q) * 1e3 for q in PERCENTILES}

    def to_dict(self) -> dict[str, Any]:
        return {
            "duration_s": self.duration_s,
            "histogram": self.histogram.to_dict(),
            "errors": dict(self.errors),
            "batch_size": self.batch_size,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WindowStats:
        return cls(
            duration_s=float(data["duration_s"]),
            histogram=LatencyHistogram.from_dict(data["histogram"]),
            errors=Counter({str(k): int(v) for k, v in data["errors"].items()}),
            batch_size=int(data["batch_size"]),
        )
