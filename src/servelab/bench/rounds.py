"""Alternating rounds: the order a round measures in, and how rounds become one figure and one ratio.

The machine a benchmark runs on is shared and drifts; measuring every contender once per round, the order
reversed on every other round, spreads that drift over all of them. The figure kept is a real round (the
median by throughput, the upper middle one for an even count, as benchmarks/serving_overhead.py does),
and a ratio to the baseline is taken within each round, against the baseline of that same round, and
only then summarised by its median: a slow round slows both sides of its own ratio.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TypeGuard, TypeVar

__all__ = ["median_or_none", "median_round", "per_round_ratios", "round_order"]

T = TypeVar("T")


def round_order(items: Sequence[T], round_index: int) -> list[T]:
    """``items`` as given on even rounds (0, 2, ...), reversed on odd ones."""
    if round_index < 0:
        raise ValueError(f"round_index must be >= 0, got {round_index}")
    return list(items) if round_index % 2 == 0 else list(reversed(items))


def _known(value: float | None) -> TypeGuard[float]:
    return value is not None and not math.isnan(value)


def median_round(throughputs: Sequence[float | None]) -> int | None:
    """Index of the median round by throughput (upper middle of an even count); rounds without a figure
    (None or NaN) are left out; None when no round has one."""
    ranked = sorted((v, i) for i, v in enumerate(throughputs) if _known(v))
    return ranked[len(ranked) // 2][1] if ranked else None


def per_round_ratios(values: Sequence[float | None], baselines: Sequence[float | None]) -> list[float | None]:
    """``values[r] / baselines[r]`` for each round r; None where either is missing or the baseline is not
    positive. Both sequences are indexed by round and must be equally long."""
    if len(values) != len(baselines):
        raise ValueError(f"{len(values)} rounds of values but {len(baselines)} rounds of baseline")
    return [
        v / b if _known(v) and _known(b) and b > 0 else None for v, b in zip(values, baselines, strict=True)
    ]


def median_or_none(values: Sequence[float | None]) -> float | None:
    """The median of the known values (mean of the two middle ones for an even count), None if none."""
    known = [v for v in values if _known(v)]
    return statistics.median(known) if known else None
