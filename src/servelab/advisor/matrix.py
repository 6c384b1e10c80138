"""Constraints, the Pareto front and the weighted decision matrix; and, for every row, why it lost.

Quantitative dimensions are scored among the rows that meet every constraint: throughput (the highest
rate within the SLA) over the best, latency (P99 at that rate) and memory (server RSS) as the best over
the row's, accuracy as 1 - the parity gate's accuracy drop. Qualitative dimensions (model support,
tooling, deployment effort, edge suitability, team stack) come from ``data/qualitative.toml``, scores 1-5
over 5. The weighted sum picks the winner among the served candidates; peers are reference rows.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from servelab.advisor.grid import Candidate
from servelab.advisor.wire import RateSearch
from servelab.errors import InvalidArgument

__all__ = [
    "DEFAULT_WEIGHTS",
    "QUALITATIVE",
    "Constraints",
    "Decision",
    "Row",
    "decide",
    "load_qualitative",
    "pareto_front",
    "parse_weights",
]

QUANTITATIVE = ("throughput", "latency", "memory", "accuracy")
QUALITATIVE = ("model_support", "tooling", "deployment_effort", "edge_suitability", "team_stack")
DEFAULT_WEIGHTS: dict[str, float] = {
    "throughput": 0.35, "latency": 0.2, "memory": 0.1, "accuracy": 0.15, "model_support": 0.05,
    "tooling": 0.04, "deployment_effort": 0.05, "edge_suitability": 0.02, "team_stack": 0.04,
}  # fmt: skip


@dataclass(frozen=True)
class Constraints:
    sla_p99_ms: float
    min_throughput: float = 0.0
    max_memory_mb: float | None = None
    max_accuracy_drop: float | None = None

    def __post_init__(self) -> None:
        if self.sla_p99_ms <= 0 or self.min_throughput < 0:
            raise InvalidArgument(f"--sla-p99-ms must be > 0 and --min-throughput >= 0, got {self.sla_p99_ms}, {self.min_throughput}")


@dataclass
class Row:
    """One measured configuration: a served candidate or a peer server as a reference."""

    label: str
    kind: str  # "candidate" | "reference"
    runtime: str
    server: str
    front_door: str
    precision: str
    search: RateSearch
    accuracy_drop: float = 0.0
    candidate: Candidate | None = None
    #: searched again and its median stands (None: no confirming in this run, every row alike)
    confirmed: bool | None = None
    score: float | None = None
    scores: dict[str, float] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    verdict: str = ""

    @property
    def max_rate(self) -> float:
        return self.search.best_rate

    @property
    def p99_ms(self) -> float | None:
        probe = self.search.best_probe
        return probe.p99_ms if probe else None

    @property
    def rss_mb(self) -> float | None:
        return self.search.rss_mb

    @property
    def complete(self) -> bool:
        return self.search.complete and self.search.error is None

    @property
    def feasible(self) -> bool:
        return self.complete and self.max_rate > 0 and not self.failed


@dataclass
class Decision:
    rows: list[Row]
    winner: Row | None
    weights: dict[str, float]
    front: list[Row]


def parse_weights(text: str | None) -> dict[str, float]:
    """``latency=0.3,throughput=0.3`` over the defaults, normalised to sum 1."""
    weights = dict(DEFAULT_WEIGHTS)
    for item in (x.strip() for x in (text or "").split(",") if x.strip()):
        key, sep, value = item.partition("=")
        if not sep or key not in weights:
            raise InvalidArgument(f"--weights {item!r}: expected NAME=VALUE with NAME one of {sorted(weights)}")
        try:
            weights[key] = float(value)
        except ValueError:
            raise InvalidArgument(f"--weights {item!r}: {value!r} is not a number") from None
        if weights[key] < 0:
            raise InvalidArgument(f"--weights {item!r}: weights must be >= 0")
    total = sum(weights.values())
    if total <= 0:
        raise InvalidArgument("--weights: at least one weight must be > 0")
    return {k: v / total for k, v in weights.items()}


def load_qualitative(path: Path | None = None) -> dict[str, Any]:
    """The qualitative scores file (the shipped one unless ``path`` names another)."""
    text = path.read_text() if path else resources.files("servelab.advisor").joinpath("data/qualitative.toml").read_text()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(f"qualitative scores {path or 'data/qualitative.toml'}: {exc}") from None
    for group in ("runtimes", "servers", "front_doors"):
        for name, scores in data.get(group, {}).items():
            bad = {k: v for k, v in scores.items() if k not in QUALITATIVE or not 1 <= v <= 5}
            if bad:
                raise InvalidArgument(f"qualitative scores [{group}.{name}]: {bad} must be dimensions {QUALITATIVE} scored 1-5")
    return data


def _qualitative(row: Row, data: dict[str, Any], dim: str) -> float:
    entries = [data.get("runtimes", {}).get(row.runtime, {}), data.get("servers", {}).get(row.server, {}),
               data.get("front_doors", {}).get(row.front_door, {})]  # fmt: skip
    values = [e[dim] for e in entries if dim in e]
    return (sum(values) / len(values)) / 5 if values else 0.5


def _check(row: Row, c: Constraints) -> None:
    if row.search.error:
        row.failed.append(row.search.error)
    elif not row.search.complete:
        return
    elif row.max_rate <= 0:
        row.failed.append(f"P99 stayed above {c.sla_p99_ms:g} ms at every load tried")
    elif row.max_rate < c.min_throughput:
        row.failed.append(f"P99 <= {c.sla_p99_ms:g} ms held only up to {row.max_rate:,.0f} req/s, below --min-throughput {c.min_throughput:,.0f}")
    if c.max_memory_mb is not None and row.rss_mb is not None and row.rss_mb > c.max_memory_mb:
        row.failed.append(f"server memory {row.rss_mb:,.0f} MB exceeds --max-memory-mb {c.max_memory_mb:,.0f}")
    if c.max_accuracy_drop is not None and row.accuracy_drop > c.max_accuracy_drop:
        row.failed.append(f"accuracy drop {row.accuracy_drop:.3g} exceeds --max-accuracy-drop {c.max_accuracy_drop:g}")


def pareto_front(rows: list[Row]) -> list[Row]:
    """Rows no other row beats on throughput, P99 and memory at once."""
    full = [r for r in rows if r.complete and r.max_rate > 0]

    def vec(r: Row) -> tuple[float, float, float]:
        return (-r.max_rate, r.p99_ms or math.inf, r.rss_mb if r.rss_mb is not None else math.inf)

    def dominated(r: Row) -> bool:
        a = vec(r)
        return any(all(x <= y for x, y in zip(vec(o), a, strict=True)) and vec(o) != a for o in full if o is not r)

    return [r for r in full if not dominated(r)]


def _score(rows: list[Row], weights: dict[str, float], qualitative: dict[str, Any]) -> None:
    feasible = [r for r in rows if r.feasible]
    if not feasible:
        return
    best_rate = max(r.max_rate for r in feasible)
    best_p99 = min((r.p99_ms for r in feasible if r.p99_ms), default=None)
    best_rss = min((r.rss_mb for r in feasible if r.rss_mb), default=None)
    for r in feasible:
        s = {
            "throughput": r.max_rate / best_rate,
            "latency": (best_p99 / r.p99_ms) if best_p99 and r.p99_ms else 1.0,
            "memory": (best_rss / r.rss_mb) if best_rss and r.rss_mb else 1.0,
            "accuracy": max(0.0, 1.0 - r.accuracy_drop),
        }
        s.update({dim: _qualitative(r, qualitative, dim) for dim in QUALITATIVE})
        r.scores = s
        r.score = sum(weights[k] * s[k] for k in weights)


def _explain(row: Row, winner: Row | None, weights: dict[str, float], front: list[Row]) -> str:
    if row is winner:
        return "selected: highest weighted score among the candidates that meet every constraint"
    if row.failed:
        return "; ".join(row.failed)
    if not row.complete and winner is not None:
        probe = row.search.probes[0] if row.search.probes else None
        seen = f" (at {probe.offered:,.0f} req/s: P99 {probe.p99_ms:.2f} ms, {probe.achieved_rps:,.0f} req/s served)" if probe else ""
        return f"could not beat the incumbent's rate within the SLA{seen}: measured no further"
    if winner is None or row.score is None or winner.score is None:
        return "no candidate meets every constraint"
    if row.confirmed is False and winner.confirmed and row.score > winner.score:
        return (f"searched once, not confirmed: its one figure ({row.max_rate:,.0f} req/s) does not outrank the "
                f"winner's confirmed median ({winner.max_rate:,.0f} req/s)")  # fmt: skip
    gaps = sorted(((weights[k] * (winner.scores[k] - row.scores[k]), k) for k in weights), reverse=True)[:2]
    detail = ", ".join(f"{k} {_figure(k, row)} vs {_figure(k, winner)}" for gap, k in gaps if gap > 0)
    tail = "" if row in front else " (off the Pareto front)"
    prefix = "reference row (a peer server); " if row.kind == "reference" else ""
    return f"{prefix}score {row.score:.3f} vs {winner.score:.3f}: {detail or 'slightly behind'}{tail}"


def _figure(dim: str, row: Row) -> str:
    if dim == "throughput":
        return f"{row.max_rate:,.0f} req/s"
    if dim == "latency":
        return f"P99 {row.p99_ms:.2f} ms" if row.p99_ms else "-"
    if dim == "memory":
        return f"{row.rss_mb:,.0f} MB" if row.rss_mb else "-"
    if dim == "accuracy":
        return f"drop {row.accuracy_drop:.3g}"
    return f"{row.scores.get(dim, 0) * 5:.1f}/5"


def decide(rows: list[Row], constraints: Constraints, weights: dict[str, float], qualitative: dict[str, Any]) -> Decision:
    """Check constraints, score, pick the best candidate, and write every row's verdict."""
    for r in rows:
        r.failed = []
        _check(r, constraints)
    _score(rows, weights, qualitative)
    contenders = [r for r in rows if r.kind == "candidate" and r.feasible and r.score is not None]
    # a configuration searched once does not outrank a confirmed median (one search varies by up to +-30% on 2
    # shared cores): where some were confirmed, the winner is one of them
    contenders = [r for r in contenders if r.confirmed is not False] or contenders
    winner = max(contenders, key=lambda r: (r.score, r.max_rate)) if contenders else None
    front = pareto_front(rows)
    for r in rows:
        r.verdict = _explain(r, winner, weights, front)
    return Decision(rows, winner, weights, front)
