"""What happens once a routed request is answered: its variant's count and latency, the rollout's gates,
and maybe a shadow copy.

:meth:`Routed.done` reports here, after the client's answer is known; a copy runs on the router's
:class:`~servelab.core.routing.shadow.ShadowPool`, never delaying the primary, and one that fails or is shed
is counted, not raised. Variant counts are the ``servelab_routing_*`` metrics and the rollout status.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from servelab.backends.base import Inputs, Outputs
from servelab.core.records import LoadedVersion
from servelab.core.routing.rollout import Rollout
from servelab.core.routing.shadow import ShadowPool
from servelab.core.routing.table import RouteTable, Target
from servelab.core.routing.windows import Comparison, compare_outputs
from servelab.metrics.histograms import LATENCY_BUCKETS_S, Histogram

__all__ = ["Outcomes", "Routed", "VariantStats"]

log = logging.getLogger("servelab.routing")

#: a version's serve times are judged by the P99 gate only after this many executions: a freshly loaded
#: version pays for allocations and caches, and its scheduler runs it through a thread pool until it has
#: learnt that it is fast enough to run inline (up to ~10x its warm time). Without this a good candidate
#: was rolled back at the shadow step of benchmarks/soak.py (candidate P99 6.7 ms vs stable 0.2 ms).
COLD_EXECUTIONS = 64


def _warm(lv: LoadedVersion, serve_s: float | None) -> float | None:
    """``serve_s``, or None (counted, not timed) while ``lv`` is still cold."""
    return serve_s if lv.stats.execution_count >= COLD_EXECUTIONS else None


@dataclass
class VariantStats:
    """Requests of one variant of one model (metrics ``servelab_routing_*``)."""

    model: str
    variant: str
    target_model: str
    version: int
    requests: int = 0
    errors: int = 0
    latency: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS_S))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, ok: bool, serve_s: float | None) -> None:
        with self._lock:
            self.requests += 1
            self.errors += 0 if ok else 1
        if ok and serve_s is not None:
            self.latency.observe(serve_s)


class Routed:
    """The decision for one request of a routed model, and what to count and copy once it is answered."""

    __slots__ = ("lv", "outcomes", "table", "variant")

    def __init__(self, outcomes: Outcomes, table: RouteTable, variant: str, lv: LoadedVersion) -> None:
        self.outcomes, self.table, self.variant, self.lv = outcomes, table, variant, lv

    def done(self, ok: bool, serve_s: float | None, inputs: Inputs, outputs: Outputs | None) -> None:
        """Count the answer (``ok``: no server error) for the variant and the gates; maybe copy it."""
        self.outcomes.record(self, ok, serve_s, inputs, outputs)


class Outcomes:
    """Counts and copies the answers of routed requests for one router (its lookup, shadow pool and random
    source: the same draws decide splits and copy samples)."""

    def __init__(self, lookup: Callable[[Target], LoadedVersion], shadows: ShadowPool, rng: random.Random) -> None:
        self._lookup = lookup
        self.shadows = shadows
        self._rng = rng
        self._lock = threading.Lock()
        self._variants: dict[tuple[str, str, str, int], VariantStats] = {}

    def record(self, routed: Routed, ok: bool, serve_s: float | None, inputs: Inputs, outputs: Outputs | None) -> None:
        table, lv = routed.table, routed.lv
        self.stats(table.model, routed.variant, lv).record(ok, serve_s)
        rollout = table.rollout
        if rollout is not None:
            self._rollout_after(rollout, lv, ok, serve_s, inputs, outputs)
            return
        plan = table.shadow
        if plan is None or not ok or outputs is None or serve_s is None or lv.name != table.model:
            return
        if lv.version != plan.target.version and self._rng.random() < plan.sample:
            self._copy(plan.comparison, plan.target, inputs, outputs, serve_s, primary_is_reference=True)

    def _rollout_after(self, rollout: Rollout, lv: LoadedVersion, ok: bool, serve_s: float | None,
                       inputs: Inputs, outputs: Outputs | None) -> None:
        state = rollout.state
        if lv.name != state.model or lv.version not in (state.stable, state.candidate):
            return
        on_stable = lv.version == state.stable
        (rollout.stable if on_stable else rollout.candidate).record(ok, _warm(lv, serve_s))
        comparison = rollout.comparison
        if not ok or outputs is None or serve_s is None or comparison is None:
            return
        if on_stable != state.shadow_step or self._rng.random() >= rollout.copy_sample:
            return
        other = Target(state.model, state.candidate if on_stable else state.stable)
        self._copy(comparison, other, inputs, outputs, serve_s, primary_is_reference=on_stable, rollout=rollout)

    def _copy(self, comparison: Comparison, target: Target, inputs: Inputs, outputs: Outputs, primary_s: float,
              *, primary_is_reference: bool, rollout: Rollout | None = None) -> None:
        def failed(exc: Exception) -> None:  # the copy failed: counted, the client already has its answer
            log.debug("shadow copy to %s failed: %s", target, exc)
            comparison.record_failure()
            if rollout is not None and rollout.state.shadow_step:
                rollout.candidate.record(False, None)

        def answered(other: LoadedVersion, answer: Outputs, elapsed_ns: int) -> None:
            other.stats.record_request(True, elapsed_ns)
            other_s = elapsed_ns / 1e9
            diff, agree, rows = compare_outputs(outputs, answer)
            reference_s, other_side_s = (primary_s, other_s) if primary_is_reference else (other_s, primary_s)
            comparison.record(diff, agree, rows, reference_s, other_side_s)
            if rollout is not None:
                timed = _warm(other, other_s)
                if rollout.state.shadow_step:
                    rollout.candidate.record(True, timed)
                elif timed is not None:
                    rollout.stable.add_latency(timed)

        def job() -> None:  # in a thread: the in-process API's requests
            try:
                other = self._lookup(target)
                t0 = time.perf_counter_ns()
                answer = other.scheduler.run(inputs)
            except Exception as exc:
                failed(exc)
                return
            answered(other, answer, time.perf_counter_ns() - t0)

        async def on_loop() -> None:  # on the servers' event loop, the way a request runs
            try:
                other = self._lookup(target)
                t0 = time.perf_counter_ns()
                answer = await other.scheduler.run_async(inputs)
            except Exception as exc:
                failed(exc)
                return
            answered(other, answer, time.perf_counter_ns() - t0)

        if not self.shadows.submit(job, on_loop):
            comparison.record_shed()

    def stats(self, model: str, variant: str, lv: LoadedVersion) -> VariantStats:
        key = (model, variant, lv.name, lv.version)
        stats = self._variants.get(key)
        if stats is None:
            with self._lock:
                stats = self._variants.setdefault(key, VariantStats(model, variant, lv.name, lv.version))
        return stats

    def variant_stats(self) -> list[VariantStats]:
        return list(self._variants.values())
