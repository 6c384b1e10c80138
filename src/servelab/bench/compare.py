"""``servelab compare``: one model, one load, several targets in one run, as the published comparisons
print it: per target and client batch size, P50, P99, throughput and server memory, with ratios to a
baseline measured in the same run.

Every target is started once (``peers.targets.open_target``) and stays up for the whole run; the run is
``rounds`` alternating rounds (``bench.rounds``): each round measures every target at every batch size
once, one at a time, so the targets never compete with each other for the two cores, the order reversed
on every other round so the machine's drift hits them all alike. A row shows the median round by
throughput, the spread over rounds, and the median of the per-round ratios to the baseline. Each point
is measured with ``run_sweep`` at one concurrency level, or with perf_analyzer (``client="perf_analyzer"``,
OIP targets only) to confirm a figure with Triton's client.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from servelab.bench.peers.family import find_family
from servelab.bench.peers.targets import OpenTarget, PeerSettings, TargetChoice, open_target
from servelab.bench.results import LevelResult
from servelab.bench.rounds import median_or_none, median_round, per_round_ratios, round_order
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
    rounds: int = 1

    def __post_init__(self) -> None:
        if not self.batch_sizes or any(b < 1 for b in self.batch_sizes):
            raise InvalidArgument(f"--batch-sizes must be whole numbers >= 1, got {list(self.batch_sizes)}")
        if self.concurrency < 1:
            raise InvalidArgument(f"--concurrency must be >= 1, got {self.concurrency}")
        if self.rounds < 1:
            raise InvalidArgument(f"--rounds must be a whole number >= 1, got {self.rounds}")
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

    def order(self, round_index: int) -> list[tuple[str, int]]:
        """(target label, batch size) in the order round ``round_index`` measures them."""
        cells = [(t.label, b) for t in self.targets for b in self.batch_sizes]
        return round_order(cells, round_index)


@dataclass
class TargetOutcome:
    """One target's levels, per round by batch size, or why it could not be (fully) measured."""

    label: str
    description: dict[str, Any] = field(default_factory=dict)
    rounds: list[dict[int, LevelResult]] = field(default_factory=list)
    error: str | None = None

    def series(self, batch_size: int) -> list[LevelResult | None]:
        """This batch size's level in each round (None where the round did not measure it)."""
        return [r.get(batch_size) for r in self.rounds]

    def batch_sizes(self) -> list[int]:
        return sorted({b for r in self.rounds for b in r})

    @property
    def levels(self) -> dict[int, LevelResult]:
        """Per batch size, the level of its median round by inferences/s (the figure shown)."""
        out = {}
        for b in self.batch_sizes():
            series = self.series(b)
            i = median_round([_ips(lv) for lv in series])
            if i is not None and (lv := series[i]) is not None:
                out[b] = lv
        return out


@dataclass(frozen=True)
class CompareRow:
    """One target at one batch size: its median round's figures, the spread over rounds and the median
    of the per-round ratios to the baseline (the defaults read documents written before rounds)."""

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
    rounds: int = 1
    median_round: int = 0
    inferences_per_s_min: float | None = None
    inferences_per_s_max: float | None = None
    inferences_per_s_rounds: tuple[float | None, ...] = ()
    throughput_ratio_rounds: tuple[float | None, ...] = ()


@dataclass
class CompareResult:
    spec: CompareSpec
    outcomes: list[TargetOutcome]
    orders: list[list[tuple[str, int]]] = field(default_factory=list)

    def rows(self) -> list[CompareRow]:
        """One row per target and batch size; ratios per round against the baseline's same batch size."""
        base = next((o for o in self.outcomes if o.label == self.spec.baseline), None)  # its rounds measured
        return [_row(o, b, base) for o in self.outcomes for b in o.batch_sizes()]

    def to_dict(self) -> dict[str, Any]:
        spec = asdict(self.spec)
        spec["repository"] = str(self.spec.repository)
        spec["peers"]["peers_dir"] = str(self.spec.peers.peers_dir)
        return {
            "model": self.spec.model,
            "settings": spec,
            "rows": [asdict(r) for r in self.rows()],
            "order": [[list(cell) for cell in order] for order in self.orders],
            "targets": [
                {
                    "label": o.label,
                    "description": o.description,
                    "error": o.error,
                    "levels": {str(b): lv.to_dict() for b, lv in o.levels.items()},
                    "rounds": [{str(b): lv.to_dict() for b, lv in r.items()} for r in o.rounds],
                }
                for o in self.outcomes
            ],
        }

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, default=str))


def _ips(level: LevelResult | None) -> float | None:
    return None if level is None else level.summary.inferences_per_s


def _p50_ms(level: LevelResult | None) -> float | None:
    return None if level is None else level.summary.histogram.percentile(50) * 1e3


def _row(o: TargetOutcome, b: int, base: TargetOutcome | None) -> CompareRow:
    series = o.series(b)
    ips = [_ips(lv) for lv in series]
    # the median round; where no round gave a figure (NaN throughput), the first round measured
    i = median_round(ips)
    if i is None:
        i = next(k for k, x in enumerate(series) if x is not None)
    lv = series[i]
    assert lv is not None  # median_round picks a round with a figure
    refs = base.series(b) if base is not None else [None] * len(series)
    refs = (refs + [None] * len(series))[: len(series)]
    thr = per_round_ratios(ips, [_ips(r) for r in refs])
    p50 = per_round_ratios([_p50_ms(x) for x in series], [_p50_ms(r) for r in refs])
    known = [v for v in ips if v is not None and not math.isnan(v)]
    return CompareRow(
        target=_shown(o), protocol=str(o.description.get("protocol", "")), batch_size=b,
        p50_ms=lv.summary.histogram.percentile(50) * 1e3, p99_ms=lv.summary.histogram.percentile(99) * 1e3,
        requests_per_s=lv.throughput_rps, inferences_per_s=lv.summary.inferences_per_s,
        server_rss_mb=lv.server_rss_mb, stable=lv.stable, errors=sum(lv.errors.values()),
        throughput_ratio=median_or_none(thr), p50_ratio=median_or_none(p50),
        rounds=sum(x is not None for x in series), median_round=i,
        inferences_per_s_min=min(known, default=None), inferences_per_s_max=max(known, default=None),
        inferences_per_s_rounds=tuple(ips), throughput_ratio_rounds=tuple(thr),
    )  # fmt: skip


def _shown(outcome: TargetOutcome) -> str:
    """The label, and how the model was served where a peer could not serve it natively."""
    served_as = outcome.description.get("served_as")
    return f"{outcome.label} ({served_as})" if served_as and "generated" in str(served_as) else outcome.label


def _measure(
    spec: CompareSpec, target: OpenTarget, outcome: TargetOutcome, b: int, progress: Progress
) -> LevelResult:
    """One point: ``target`` at batch size ``b``, at the spec's concurrency."""
    inputs = InputSpec(batch_size=b, shapes=target.shapes)
    if spec.client == "perf_analyzer":
        from servelab.bench.perf_analyzer import PerfAnalyzer

        pa = PerfAnalyzer(spec.peers.peers_dir, progress)
        sweep = pa.sweep(target.spec, target.model, spec.load(), inputs)
        outcome.description["client"] = "perf_analyzer " + str(sweep.settings["perf_analyzer"]["version"])
    else:
        sweep = run_sweep(target.spec, target.model, spec.load(), inputs, measure_ceiling=False)
    return sweep.levels[0]


def _open_all(
    spec: CompareSpec, stack: contextlib.ExitStack, outcomes: list[TargetOutcome], say: Progress
) -> dict[str, OpenTarget]:
    """Start every target once, for the whole run; one that cannot start is reported, not fatal."""
    family = find_family(spec.repository, spec.model)
    opened = {}
    for choice, outcome in zip(spec.targets, outcomes, strict=True):
        try:
            target = stack.enter_context(open_target(choice, family, spec.peers, spec.model, say))
        except ServelabError as exc:
            say(f"{choice.label}: skipped: {exc}")
            outcome.error = str(exc)
            continue
        outcome.description = target.description
        opened[choice.label] = target
    return opened


def _run_round(
    spec: CompareSpec,
    rnd: int,
    opened: dict[str, OpenTarget],
    outcomes: dict[str, TargetOutcome],
    say: Progress,
) -> list[tuple[str, int]]:
    """Measure round ``rnd`` in its order; a target that fails a point is reported and measured no more."""
    done = []
    for label, b in spec.order(rnd):
        outcome = outcomes[label]
        if label not in opened or outcome.error is not None:
            continue
        while len(outcome.rounds) <= rnd:
            outcome.rounds.append({})
        try:
            level = _measure(spec, opened[label], outcome, b, say)
        except ServelabError as exc:
            say(f"{label}: round {rnd + 1}, batch {b}: stopped: {exc}")
            outcome.error = f"round {rnd + 1}, batch {b}: {exc}"
            continue
        outcome.rounds[rnd][b] = level
        done.append((label, b))
        failed = f" failures: {level.failures}" if level.failures else ""
        say(
            f"round {rnd + 1}/{spec.rounds} {label} batch {b}: {level.summary.inferences_per_s:,.0f} inf/s, "
            f"P50 {level.summary.histogram.percentile(50) * 1e3:.2f} ms{failed}"
        )
    return done


def run_compare(spec: CompareSpec, progress: Progress | None = None) -> CompareResult:
    """Start every target, measure ``spec.rounds`` alternating rounds, stop them all."""
    say = progress or (lambda _m: None)
    find_family(spec.repository, spec.model)  # fail fast on a bad model name
    if spec.client == "perf_analyzer":
        from servelab.bench.perf_analyzer import PerfAnalyzer

        PerfAnalyzer(spec.peers.peers_dir, say).ensure()  # once, before any server starts
    outcomes = [TargetOutcome(c.label, {"target": c.label}) for c in spec.targets]
    orders = []
    with contextlib.ExitStack() as stack:
        opened = _open_all(spec, stack, outcomes, say)
        by_label = {o.label: o for o in outcomes}
        for rnd in range(spec.rounds):
            orders.append(_run_round(spec, rnd, opened, by_label, say))
    return CompareResult(spec, outcomes, orders)
