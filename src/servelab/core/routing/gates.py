"""The three gates of a canary step, measured live: error rate, P99 against stable, output agreement.

Each gate answers passed / failed / not yet (too few samples) with its value and threshold, so the
status, the CLI and the metrics show the same numbers the decision used. A gate that has its samples
and fails rolls the rollout back at once; one disagreeing answer fails the max-abs-diff gate at once
(a wrong answer needs no statistics), while its pass waits for ``min_samples`` compared requests.
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


def _p99(gates: Gates, stable: SideSnapshot, candidate: SideSnapshot) -> GateResult:
    have = min(len(stable.latencies_s), len(candidate.latencies_s))
    stable_p99, value = stable.p99_ms(), candidate.p99_ms()
    if have < gates.min_samples or stable_p99 is None or value is None:
        return GateResult("p99_ms", value, None, None,
                          f"{len(candidate.latencies_s)} candidate / {len(stable.latencies_s)} stable latency "
                          f"samples of {gates.min_samples} needed")
    threshold = stable_p99 * (1 + gates.p99_max_increase) + gates.p99_slack_ms
    passed = value <= threshold
    return GateResult("p99_ms", value, threshold, passed,
                      f"candidate P99 {value:.3f} ms vs stable {stable_p99:.3f} ms "
                      f"(at most +{gates.p99_max_increase:.0%}{f' + {gates.p99_slack_ms:g} ms' if gates.p99_slack_ms else ''})")


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
    gates: Gates, stable: SideSnapshot, candidate: SideSnapshot, comparison: Comparison | None
) -> list[GateResult]:
    """Every gate of one step: error rate, P99, agreement (in that order)."""
    return [_error_rate(gates, stable, candidate), _p99(gates, stable, candidate), _agreement(gates, comparison)]
