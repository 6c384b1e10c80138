"""The three gates of a canary step, measured live: error rate, P99 against stable, output agreement.

Each gate answers passed / failed / not yet (too few samples) with its value and threshold, so the
status, the CLI and the metrics show the same numbers the decision used. The error-rate and agreement
gates fail at once when they have their samples; one disagreeing answer fails the max-abs-diff gate at
once (a wrong answer needs no statistics), while its pass waits for ``min_samples`` compared requests.

The P99 gate compares the two variants over the same span of time (the newest samples of each, from the
later of their oldest), so a burst of load on the shared machine weighs on both sides alike; and it is
decided when the step ends (``final``), on the whole step's samples, unless the candidate is more than
:data:`EARLY_P99_FACTOR` times over its bound before that. Judged as soon as it had ``min_samples``, a
5% canary's P99 over its first seconds against stable's newest samples rolled back an identical candidate
(benchmarks/soak.py: 37.1 vs 23.5 ms on a loaded machine).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from servelab.core.routing.policy import Gates
from servelab.core.routing.windows import Comparison, SideSnapshot

__all__ = ["GateResult", "evaluate_gates"]


@dataclass(frozen=True)
class GateResult:
    name: str
    value: float | None
    threshold: float | None
    #: True passed, False failed, None: not enough samples yet
    passed: bool | None
    detail: str

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("value", "threshold"):
            if isinstance(out[key], float) and not math.isfinite(out[key]):
                out[key] = "inf"
        return out


def _error_rate(gates: Gates, stable: SideSnapshot, candidate: SideSnapshot) -> GateResult:
    baseline = stable.error_rate if stable.requests >= gates.min_samples else 0.0
    threshold = baseline + gates.max_error_rate_increase
    value = candidate.error_rate
    if candidate.requests < gates.min_samples:
        return GateResult("error_rate", value, threshold, None,
                          f"{candidate.requests}/{gates.min_samples} candidate requests so far")
    passed = value <= threshold
    return GateResult("error_rate", value, threshold, passed,
                      f"{candidate.errors} errors in {candidate.requests} candidate requests "
                      f"({'within' if passed else 'above'} stable {baseline:.2%} + {gates.max_error_rate_increase:.2%})")


#: a candidate P99 more than this many times its bound fails before the step ends: a plainly slower version
#: need not take a whole step's traffic; anything closer is decided on the whole step
EARLY_P99_FACTOR = 2.0


def _same_span(stable: SideSnapshot, candidate: SideSnapshot) -> tuple[SideSnapshot, SideSnapshot, str]:
    """Both sides' serve times from the later of their oldest samples on; where stable has none since the
    candidate's first (the 100% step: no live stable traffic), its whole last window is the baseline."""
    if stable.first_s is None or candidate.first_s is None:
        return stable, candidate, ""
    start = max(stable.first_s, candidate.first_s)
    paired_stable = stable.since(start)
    if not paired_stable.latencies_s:
        return stable, candidate, "stable's last window as the baseline"
    paired = candidate.since(start)
    end = max(paired_stable.times_s[-1], paired.times_s[-1] if paired.times_s else start)
    return paired_stable, paired, f"over the same {end - start:.1f} s"


def _p99(gates: Gates, stable: SideSnapshot, candidate: SideSnapshot, final: bool) -> GateResult:
    stable, candidate, span = _same_span(stable, candidate)
    have = min(len(stable.latencies_s), len(candidate.latencies_s))
    stable_p99, value = stable.p99_ms(), candidate.p99_ms()
    if have < gates.min_samples or stable_p99 is None or value is None:
        return GateResult("p99_ms", value, None, None,
                          f"{len(candidate.latencies_s)} candidate / {len(stable.latencies_s)} stable latency "
                          f"samples of {gates.min_samples} needed{f' ({span})' if span else ''}")
    threshold = stable_p99 * (1 + gates.p99_max_increase) + gates.p99_slack_ms
    passed: bool | None = value <= threshold
    detail = (f"candidate P99 {value:.3f} ms vs stable {stable_p99:.3f} ms {span}, {len(candidate.latencies_s)} / "
              f"{len(stable.latencies_s)} samples (at most +{gates.p99_max_increase:.0%}"
              f"{f' + {gates.p99_slack_ms:g} ms' if gates.p99_slack_ms else ''})")  # fmt: skip
    if not passed and not final and value <= EARLY_P99_FACTOR * threshold:
        passed, detail = None, f"{detail}: above so far, decided when the step ends"
    return GateResult("p99_ms", value, threshold, passed, detail)


def _agreement(gates: Gates, comparison: Comparison | None) -> GateResult:
    if comparison is None:
        return GateResult("agreement", None, None, True, "not measured (agreement_sample is 0)")
    n = comparison.compared
    if gates.min_top1_agreement is not None:
        value = comparison.top1_agreement
        threshold = gates.min_top1_agreement
        if n < gates.min_samples or value is None:
            return GateResult("top1_agreement", value, threshold, None, f"{n}/{gates.min_samples} compared requests")
        passed = value >= threshold
        return GateResult("top1_agreement", value, threshold, passed,
                          f"top-1 agrees on {comparison.agree_rows} of {comparison.rows} rows")
    worst, threshold = comparison.max_diff, gates.max_abs_diff
    if n and worst > threshold:
        return GateResult("max_abs_diff", worst, threshold, False,
                          f"outputs differ by up to {worst:.6g} (> {threshold:g}) over {n} compared requests")
    if n < gates.min_samples:
        return GateResult("max_abs_diff", worst if n else None, threshold, None,
                          f"{n}/{gates.min_samples} compared requests")
    return GateResult("max_abs_diff", worst, threshold, True, f"outputs within {threshold:g} over {n} compared requests")


def evaluate_gates(
    gates: Gates, stable: SideSnapshot, candidate: SideSnapshot, comparison: Comparison | None, final: bool = True
) -> list[GateResult]:
    """Every gate of one step: error rate, P99, agreement (in that order). ``final``: the step has its dwell
    time and requests, so the P99 gate decides (before, it fails only when far over its bound)."""
    return [_error_rate(gates, stable, candidate), _p99(gates, stable, candidate, final), _agreement(gates, comparison)]
