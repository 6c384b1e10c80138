"""A staged canary as a state machine: the persisted state, the live windows of the step, the decision.

:class:`RolloutState` is what survives a restart (sqlite, :mod:`servelab.core.routing.store`): the
versions, the specification, the step it is at and why it ended. :class:`Rollout` adds the live
windows of the current step and :meth:`Rollout.evaluate`, which the router calls a few times a
second: a gate that fails rolls back at once, with its reason (the P99 gate decides at the step's end unless far
over its bound: servelab.core.routing.gates); when every gate passes and the step
has its dwell time and requests, the rollout goes to the next step, or after the last one is
promoted. After a restart the step resumes with empty windows and a fresh dwell timer, so no step is
ever skipped (and 100% is reached only through the steps before it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from servelab.core.routing.gates import GateResult, evaluate_gates
from servelab.core.routing.policy import RolloutSpec
from servelab.core.routing.windows import Comparison, SideWindow

__all__ = ["CANARY", "STABLE", "Decision", "Rollout", "RolloutState", "Status"]

#: variant names of a rollout's two sides (metrics, status, implicit labels)
STABLE, CANARY = "stable", "canary"


class Status(str, Enum):
    RUNNING = "running"
    PAUSED = "paused"
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back"
    ABORTED = "aborted"

    @property
    def active(self) -> bool:
        return self in (Status.RUNNING, Status.PAUSED)


@dataclass
class RolloutState:
    """What is persisted of one model's rollout."""

    model: str
    stable: int
    candidate: int
    spec: RolloutSpec
    step: int = 0
    status: Status = Status.RUNNING
    reason: str = ""
    started_at: float = field(default_factory=time.time)
    step_started_at: float = field(default_factory=time.time)

    @property
    def percent(self) -> float:
        """Candidate share of live traffic now, in percent."""
        if self.status is Status.PROMOTED:
            return 100.0
        if not self.status.active:
            return 0.0
        return self.spec.percents()[self.step]

    @property
    def shadow_step(self) -> bool:
        return self.status.active and self.percent == 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "stable": self.stable, "candidate": self.candidate,
            "spec": self.spec.model_dump(), "step": self.step, "status": self.status.value,
            "reason": self.reason, "started_at": self.started_at, "step_started_at": self.step_started_at,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutState:
        return cls(
            data["model"], int(data["stable"]), int(data["candidate"]), RolloutSpec.model_validate(data["spec"]),
            int(data["step"]), Status(data["status"]), str(data.get("reason", "")),
            float(data["started_at"]), float(data["step_started_at"]),
        )


@dataclass(frozen=True)
class Decision:
    """What one evaluation decided: ``advance``, ``promote`` or ``rollback`` (with the reason)."""

    action: str
    reason: str


class Rollout:
    """One model's rollout: persisted state plus the live windows of the step it is at."""

    def __init__(self, state: RolloutState, capacity: int, now: float | None = None) -> None:
        self.state = state
        self.capacity = capacity
        self.last_gates: list[GateResult] = []
        self._new_step(time.monotonic() if now is None else now)

    def _new_step(self, now: float, stable: SideWindow | None = None) -> None:
        self.step_started = now
        self.stable = stable if stable is not None else SideWindow(self.capacity)
        self.candidate = SideWindow(self.capacity)
        measured = self.state.shadow_step or self.state.spec.agreement_sample > 0
        self.comparison: Comparison | None = Comparison(STABLE, CANARY, self.capacity) if measured else None
        self.last_gates = []

    @property
    def share(self) -> float:
        """Candidate share of live traffic (0..1)."""
        return self.state.percent / 100.0

    @property
    def copy_sample(self) -> float:
        """Share of requests copied to the other side: stable -> candidate in the shadow step, else canary ->
        stable for the agreement gate."""
        spec = self.state.spec
        return spec.shadow_sample if self.state.shadow_step else spec.agreement_sample

    def gates(self, now: float | None = None) -> list[GateResult]:
        final = self.step_done(time.monotonic() if now is None else now)
        return evaluate_gates(self.state.spec.gates, self.stable.snapshot(), self.candidate.snapshot(), self.comparison,
                              final)  # fmt: skip

    def evaluate(self, now: float | None = None) -> Decision | None:
        """Roll back on a failed gate (also when paused); advance or promote when the step is done."""
        if not self.state.status.active:
            return None
        now = time.monotonic() if now is None else now
        self.last_gates = gates = self.gates(now)
        failed = [g for g in gates if g.passed is False]
        if failed:
            return Decision("rollback", "; ".join(f"gate {g.name} failed: {g.detail}" for g in failed))
        if self.state.status is Status.PAUSED or not self.state.spec.auto:
            return None
        if not self.step_done(now) or not all(g.passed for g in gates):
            return None
        last = self.state.step == len(self.state.spec.percents()) - 1
        return Decision("promote" if last else "advance", self._passed_reason(gates, now))

    def step_done(self, now: float) -> bool:
        spec = self.state.spec
        return now - self.step_started >= spec.min_dwell_s and self.candidate.snapshot().requests >= spec.min_requests

    def _passed_reason(self, gates: list[GateResult], now: float) -> str:
        shown = ", ".join(f"{g.name} {g.value:.4g} <= {g.threshold:.4g}" if g.name != "top1_agreement"
                          and g.value is not None and g.threshold is not None else g.name for g in gates)
        return (f"step {self.state.step} ({self.state.percent:g}%) passed after {now - self.step_started:.1f} s "
                f"and {self.candidate.snapshot().requests} candidate requests: {shown}")

    def advance(self, now: float | None = None) -> None:
        """Go to the next step (the caller persists the state). At 100% stable gets no live requests: its
        window of the step before stays the P99 baseline (agreement copies add to it)."""
        previous = self.stable
        self.state.step += 1
        self.state.step_started_at = time.time()
        keep = previous if self.state.percent >= 100 else None
        self._new_step(time.monotonic() if now is None else now, keep)

    def finish(self, status: Status, reason: str) -> None:
        self.state.status, self.state.reason = status, reason
