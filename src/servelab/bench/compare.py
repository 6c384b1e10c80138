"""``servelab compare``: one model, one load, several targets in one run, as the published comparisons
print it: per target and client batch size, P50, P99, throughput and server memory, with ratios to a
baseline measured in the same run.

Targets are opened one at a time (``peers.targets.open_target``), so servers never compete with each
other for the two cores; each is measured with ``run_sweep`` at one concurrency level per batch size, or
with perf_analyzer (``client="perf_analyzer"``, OIP targets only) to confirm a figure with Triton's client.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from servelab.bench.peers.family import find_family
from servelab.bench.peers.targets import PeerSettings, TargetChoice, open_target
from servelab.bench.results import LevelResult
from servelab.bench.specs import InputSpec, LoadSpec
from servelab.bench.sweep import run_sweep
from servelab.errors import InvalidArgument, ServelabError

__all__ = ["CLIENTS", "CompareResult", "CompareRow", "CompareSpec", "TargetOutcome", "run_compare"]

Progress = Callable[[str], None]
CLIENTS = ("builtin", "perf_analyzer")


@dataclass(frozen=True)
class CompareSpec:
    """What to compare and under which load."""

    model: str
    repository: Path
    targets: tuple[TargetChoice, ...]
    batch_sizes: tuple[int, ...] = (1, 32)
    concurrency: int = 8
    baseline: str | None = None
    measurement_interval_ms: int = 2000
    max_windows: int = 5
    warmup_requests: int = 50
    max_level_s: float = 60.0
    peers: PeerSettings = field(default_factory=PeerSettings)
    client: str = "builtin"

    def __post_init__(self) -> None:
        if not self.batch_sizes or any(b < 1 for b in self.batch_sizes):
            raise InvalidArgument(f"--batch-sizes must be whole numbers >= 1, got {list(self.batch_sizes)}")
        if self.concurrency < 1:
            raise InvalidArgument(f"--concurrency must be >= 1, got {self.concurrency}")
        if self.client not in CLIENTS:
            raise InvalidArgument(f"--client must be one of {', '.join(CLIENTS)}, got {self.client!r}")
        labels = [t.label for t in self.targets]
        if self.baseline is not None and self.baseline not in labels:
            raise InvalidArgument(f"--baseline {self.baseline!r} is not one of --targets {labels}")

    def load(self) -> LoadSpec:
        return LoadSpec(
            mode="concurrency", levels=(float(self.concurrency),), measurement_interval_ms=self.measurement_interval_ms,
            max_windows=self.max_windows, warmup_requests=self.warmup_requests, max_level_s=self.max_level_s,
            max_inflight=max(self.concurrency, 1),
        )  # fmt: skip


@dataclass
class TargetOutcome:
    """One target's levels by batch size, or why it could not be measured."""

    label: str
    description: dict[str, Any] = field(default_factory=dict)
    levels: dict[int, LevelResult] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class CompareRow:
    target: str
    protocol: str
    batch_size: int
    p50_ms: float
    p99_ms: float
    requests_per_s: float
    inferences_per_s: float
    server_rss_mb: float | None
    stable: bool
    errors: int
    throughput_ratio: float | None
    p50_ratio: float | None


@dataclass
class CompareResult:
    spec: CompareSpec
    outcomes: list[TargetOutcome]

    def rows(self) -> list[CompareRow]:
        """One row per target and batch size, ratios against the baseline's row of the same batch size."""
        base = next((o for o in self.outcomes if o.label == self.spec.baseline and o.error is None), None)
        rows = []
        for o in self.outcomes:
            for b, lv in sorted(o.levels.items()):
                ref = base.levels.get(b) if base else None
                p50 = lv.summary.histogram.percentile(50) * 1e3
                rows.append(CompareRow(
                    target=_shown(o), protocol=str(o.description.get("protocol", "")), batch_size=b, p50_ms=p50,
                    p99_ms=lv.summary.histogram.percentile(99) * 1e3, requests_per_s=lv.throughput_rps,
                    inferences_per_s=lv.summary.inferences_per_s, server_rss_mb=lv.server_rss_mb, stable=lv.stable,
                    errors=sum(lv.errors.values()),
                    throughput_ratio=_ratio(lv.summary.inferences_per_s, ref.summary.inferences_per_s) if ref else None,
                    p50_ratio=_ratio(p50, ref.summary.histogram.percentile(50) * 1e3) if ref else None,
                ))  # fmt: skip
        return rows

    def to_dict(self) -> dict[str, Any]:
        spec = asdict(self.spec)
        spec["repository"] = str(self.spec.repository)
        spec["peers"]["peers_dir"] = str(self.spec.peers.peers_dir)
        return {
            "model": self.spec.model,
            "settings": spec,
            "rows": [asdict(r) for r in self.rows()],
            "targets": [
                {
                    "label": o.label,
                    "description": o.description,
                    "error": o.error,
                    "levels": {str(b): lv.to_dict() for b, lv in o.levels.items()},
                }
                for o in self.outcomes
            ],
        }

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, default=str))


def _shown(outcome: TargetOutcome) -> str:
    """The label, and how the model was served where a peer could not serve it natively."""
    served_as = outcome.description.get("served_as")
    return f"{outcome.label} ({served_as})" if served_as and "generated" in str(served_as) else outcome.label


def _ratio(value: float, ref: float) -> float | None:
    return value / ref if ref > 0 and not math.isnan(ref) and not math.isnan(value) else None


def _measure_target(
    spec: CompareSpec, choice: TargetChoice, outcome: TargetOutcome, progress: Progress
) -> None:
    family = find_family(spec.repository, spec.model)
    with open_target(choice, family, spec.peers, spec.model, progress) as target:
        outcome.description = target.description
        for b in spec.batch_sizes:
            inputs = InputSpec(batch_size=b, shapes=target.shapes)
            if spec.client == "perf_analyzer":
                from servelab.bench.perf_analyzer import PerfAnalyzer

                pa = PerfAnalyzer(spec.peers.peers_dir, progress)
                sweep = pa.sweep(target.spec, target.model, spec.load(), inputs)
                outcome.description["client"] = "perf_analyzer " + str(sweep.settings["perf_analyzer"]["version"])
            else:
                sweep = run_sweep(target.spec, target.model, spec.load(), inputs, measure_ceiling=False)
            level = sweep.levels[0]
            outcome.levels[b] = level
            failed = f" failures: {level.failures}" if level.failures else ""
            progress(
                f"{choice.label} batch {b}: {level.summary.inferences_per_s:,.0f} inf/s, "
                f"P50 {level.summary.histogram.percentile(50) * 1e3:.2f} ms{failed}"
            )


def run_compare(spec: CompareSpec, progress: Progress | None = None) -> CompareResult:
    """Measure every target in turn; a target that cannot start is reported, not fatal."""
    say = progress or (lambda _m: None)
    find_family(spec.repository, spec.model)  # fail fast on a bad model name
    if spec.client == "perf_analyzer":
        from servelab.bench.perf_analyzer import PerfAnalyzer

        PerfAnalyzer(spec.peers.peers_dir, say).ensure()  # once, before any server starts
    outcomes = []
    for choice in spec.targets:
        outcome = TargetOutcome(choice.label, {"target": choice.label})
        outcomes.append(outcome)
        try:
            _measure_target(spec, choice, outcome, say)
        except ServelabError as exc:
            say(f"{choice.label}: skipped: {exc}")
            outcome.error = str(exc)
    return CompareResult(spec, outcomes)
