"""Load generator and measuring tools that see any server only through its public client side."""

from __future__ import annotations

from servelab.config.grpc_runtime import CLIENT_EXPERIMENTS, disable_grpc_experiments

# before any grpc import: the load generator's gRPC client costs ~150 us less per call (grpc_runtime)
disable_grpc_experiments(CLIENT_EXPERIMENTS)

from servelab.bench.results import LevelResult, SweepResult  # noqa: E402
from servelab.bench.specs import InputSpec, LoadSpec, TargetSpec  # noqa: E402
from servelab.bench.stats import LatencyHistogram, WindowStats  # noqa: E402
from servelab.bench.sweep import measure_level, run_sweep, run_sweep_async  # noqa: E402

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
