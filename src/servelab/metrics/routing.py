"""Prometheus metrics of version routing, labelled by variant: the split, the rollout's gates, shadow copies.

Read from the router at scrape time through the small protocol below (this layer imports nothing
from ``servelab.core``):

- ``servelab_routing_requests_total`` / ``servelab_routing_errors_total`` {model, variant, target_model,
  version}: requests of a routed model per variant (errors: server errors only);
  ``servelab_routing_serve_duration_seconds`` {model, variant}: their time in the scheduler, the measure
  the P99 gate uses; ``servelab_routing_traffic_share`` {model, variant}: the share each variant is meant
  to get now (split weights, or the rollout's step).
- ``servelab_rollout_percent`` / ``servelab_rollout_step`` {model}, ``servelab_rollout_status`` {model,
  status} (1 for the current one); ``servelab_rollout_gate_value`` / ``_threshold`` {model, gate} and
  ``servelab_rollout_gate_passing`` {model, gate} (1 passed, 0 failed; absent while too few samples).
- ``servelab_shadow_copies_total`` {model, reference, other, outcome}: compared, failed or shed copies;
  ``servelab_shadow_abs_diff`` {model, reference, other, quantile} and ``servelab_shadow_top1_agreement``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["ROUTING_METRICS", "RouterLike", "RoutingCollector"]

_STATUSES = ("running", "paused", "promoted", "rolled_back", "aborted")
_VARIANT = ["model", "variant", "target_model", "version"]
_SHADOW = ["model", "reference", "other"]


class RouterLike(Protocol):
    @property
    def rollouts(self) -> Mapping[str, Any]: ...

    def variant_stats(self) -> Iterable[Any]: ...

    def comparisons(self) -> Iterable[tuple[str, Any]]: ...

    def shares(self) -> Iterable[tuple[str, str, float]]: ...


def _finite(value: Any) -> float | None:
    if value == "inf":
        value = math.inf
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    if isinstance(value, int | float):
        return 1e308  # +Inf is not a gauge value dashboards compare well; a huge one is
    return None


class RoutingCollector(Collector):
    def __init__(self, router: RouterLike) -> None:
        self.router = router

    def collect(self) -> Iterator[Metric]:
        yield from self._variants()
        yield from self._rollouts()
        yield from self._shadows()

    def _variants(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("servelab_routing_requests", "Requests of a routed model, per variant",
                                       labels=_VARIANT)
        errors = CounterMetricFamily("servelab_routing_errors", "Server errors of a routed model, per variant",
                                     labels=_VARIANT)
        latency = HistogramMetricFamily("servelab_routing_serve_duration_seconds",
                                        "Time in the scheduler per routed request, per variant", labels=["model", "variant"])
        share = GaugeMetricFamily("servelab_routing_traffic_share", "Share of unversioned requests a variant is meant "
                                  "to get now (split weight or rollout step)", labels=["model", "variant"])
        merged: dict[tuple[str, str], tuple[list[tuple[str, float]], float]] = {}
        for s in self.router.variant_stats():
            labels = [s.model, s.variant, s.target_model, str(s.version)]
            requests.add_metric(labels, float(s.requests))
            errors.add_metric(labels, float(s.errors))
            buckets, total, _ = s.latency.snapshot()
            key = (s.model, s.variant)
            if key in merged:  # one variant over several versions (a split arm on "the newest")
                old, old_total = merged[key]
                buckets = [(le, n + m) for (le, n), (_, m) in zip(buckets, old, strict=True)]
                total += old_total
            merged[key] = (buckets, total)
        for (model, variant), (buckets, total) in sorted(merged.items()):
            latency.add_metric([model, variant], buckets, total)
        for model, variant, value in self.router.shares():
            share.add_metric([model, variant], value)
        yield from (requests, errors, latency, share)

    def _rollouts(self) -> Iterator[Metric]:
        percent = GaugeMetricFamily("servelab_rollout_percent", "Candidate share of live traffic, percent",
                                    labels=["model", "stable", "candidate"])
        step = GaugeMetricFamily("servelab_rollout_step", "Index of the rollout's current step", labels=["model"])
        status = GaugeMetricFamily("servelab_rollout_status", "1 for the rollout's current status",
                                   labels=["model", "status"])
        value = GaugeMetricFamily("servelab_rollout_gate_value", "A gate's measured value", labels=["model", "gate"])
        threshold = GaugeMetricFamily("servelab_rollout_gate_threshold", "A gate's threshold", labels=["model", "gate"])
        passing = GaugeMetricFamily("servelab_rollout_gate_passing", "1 passed, 0 failed (absent: too few samples)",
                                    labels=["model", "gate"])
        for model, rollout in sorted(self.router.rollouts.items()):
            state = rollout.state
            percent.add_metric([model, str(state.stable), str(state.candidate)], float(state.percent))
            step.add_metric([model], float(state.step))
            for name in _STATUSES:
                status.add_metric([model, name], 1.0 if state.status.value == name else 0.0)
            gates = rollout.gates() if state.status.active else rollout.last_gates
            for gate in gates:
                for family, raw in ((value, gate.value), (threshold, gate.threshold)):
                    number = _finite(raw)
                    if number is not None:
                        family.add_metric([model, gate.name], number)
                if gate.passed is not None:
                    passing.add_metric([model, gate.name], 1.0 if gate.passed else 0.0)
        yield from (percent, step, status, value, threshold, passing)

    def _shadows(self) -> Iterator[Metric]:
        copies = CounterMetricFamily("servelab_shadow_copies", "Shadow copies by outcome (compared, failed, shed)",
                                     labels=[*_SHADOW, "outcome"])
        diff = GaugeMetricFamily("servelab_shadow_abs_diff", "Largest absolute output difference per compared "
                                 "request, quantiles over the newest copies (quantile 1 = the maximum)",
                                 labels=[*_SHADOW, "quantile"])
        top1 = GaugeMetricFamily("servelab_shadow_top1_agreement", "Share of compared rows whose argmax agrees",
                                 labels=_SHADOW)
        for model, comparison in self.router.comparisons():
            labels = [model, comparison.reference, comparison.other]
            for outcome in ("compared", "failed", "shed"):
                copies.add_metric([*labels, outcome], float(getattr(comparison, outcome)))
            summary = comparison.summary()["abs_diff"]
            for q, key in (("0.5", "p50"), ("0.99", "p99"), ("1", "max")):
                number = _finite(summary.get(key, math.inf if key == "max" else None))
                if number is not None and comparison.compared:
                    diff.add_metric([*labels, q], number)
            agreement = comparison.top1_agreement
            if agreement is not None:
                top1.add_metric(labels, float(agreement))
        yield from (copies, diff, top1)


#: every family this collector writes (the dashboard test checks its queries against them)
ROUTING_METRICS = (
    "servelab_routing_requests_total", "servelab_routing_errors_total", "servelab_routing_serve_duration_seconds",
    "servelab_routing_traffic_share", "servelab_rollout_percent", "servelab_rollout_step", "servelab_rollout_status",
    "servelab_rollout_gate_value", "servelab_rollout_gate_threshold", "servelab_rollout_gate_passing",
    "servelab_shadow_copies_total", "servelab_shadow_abs_diff", "servelab_shadow_top1_agreement",
)
