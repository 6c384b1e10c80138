"""Results of a level and of a sweep, the stability rule, and their JSON form."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from servelab.bench.stats import WindowStats

__all__ = ["LevelResult", "SweepResult", "is_stable", "summarise_windows"]


def _spread_ok(values: list[float], pct: float) -> bool:
    lo, hi = min(values), max(values)
    if lo <= 0 or math.isnan(lo) or math.isnan(hi):
        return False
    return (hi / lo - 1.0) * 100.0 <= pct


def is_stable(windows: list[WindowStats], stability_percentage: float) -> bool:
    """perf_analyzer's rule: the last three windows' throughput and P50 agree within the percentage."""
    if len(windows) < 3:
        return False
    last = windows[-3:]
    return _spread_ok([w.requests_per_s for w in last], stability_percentage) and _spread_ok(
        [w.histogram.percentile(50) for w in last], stability_percentage
    )


def summarise_windows(windows: list[WindowStats]) -> WindowStats:
    """Merge consecutive windows into one (durations add)."""
    total = WindowStats(0.0, batch_size=windows[0].batch_size if windows else 1)
    for w in windows:
        total.merge_sequential(w)
    return total


@dataclass
class LevelResult:
    """One load level's outcome; ``summary`` merges the windows the figures are taken from."""

    mode: str
    level: float
    workers: int
    batch_size: int
    windows: list[WindowStats]
    summary: WindowStats
    stable: bool
    sent: int
    errors: Counter[str] = field(default_factory=Counter)
    server: dict[str, float] | None = None
    server_rss_mb: float | None = None
    ceiling_rps: float | None = None
    failures: list[str] = field(default_factory=list)

    @property
    def throughput_rps(self) -> float:
        return self.summary.requests_per_s

    @property
    def client_limited(self) -> bool | None:
        """True when throughput is within a factor 2 of the generator's own ceiling."""
        if self.ceiling_rps is None or self.ceiling_rps <= 0:
            return None
        return self.throughput_rps * 2.0 >= self.ceiling_rps

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "level": self.level,
            "workers": self.workers,
            "batch_size": self.batch_size,
            "stable": self.stable,
            "n_windows": len(self.windows),
            "sent": self.sent,
            "completed": self.summary.completed,
            "throughput_rps": self.throughput_rps,
            "inferences_per_s": self.summary.inferences_per_s,
            "latency_ms": {**self.summary.percentiles_ms(), "mean": self.summary.histogram.mean() * 1e3},
            "errors": dict(self.errors),
            "server": self.server,
            "server_rss_mb": self.server_rss_mb,
            "ceiling_rps": self.ceiling_rps,
            "client_limited": self.client_limited,
            "failures": self.failures,
            "windows": [
                {
                    "duration_s": w.duration_s,
                    "throughput_rps": w.requests_per_s,
                    "p50_ms": w.histogram.percentile(50) * 1e3,
                }
                for w in self.windows
            ],
            "histogram": self.summary.histogram.to_dict(),
        }


@dataclass
class SweepResult:
    """Every level measured against one target."""

    target: str
    kind: str
    model: str
    levels: list[LevelResult]
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "kind": self.kind,
            "model": self.model,
            "settings": self.settings,
            "levels": [lv.to_dict() for lv in self.levels],
        }
