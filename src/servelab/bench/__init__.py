"""Load generator and measuring tools that see any server only through its public client side.

Installed with the ``bench`` extra (``pip install 'servelab[bench]'``). Importing it changes nothing
process-wide: a program that owns its process and measures over gRPC calls
``servelab.config.grpc_runtime.disable_grpc_experiments(CLIENT_EXPERIMENTS)`` before grpc is imported
(the ``servelab`` command does). :mod:`servelab.bench.net` holds the helpers scripts need to start and
reach servers (free ports, readiness, one-shot HTTP).
"""

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
