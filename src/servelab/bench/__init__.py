"""Load generator and measuring tools that see any server only through its public client side."""

from __future__ import annotations

from servelab.bench.results import LevelResult, SweepResult
from servelab.bench.specs import InputSpec, LoadSpec, TargetSpec
from servelab.bench.stats import LatencyHistogram, WindowStats
from servelab.bench.sweep import measure_level, run_sweep, run_sweep_async

__all__ = [
    "InputSpec",
    "LatencyHistogram",
    "LevelResult",
    "LoadSpec",
    "SweepResult",
    "TargetSpec",
    "WindowStats",
    "measure_level",
    "run_sweep",
    "run_sweep_async",
]
