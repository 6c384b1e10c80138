"""Rollout control: start, pause, resume, abort, promote, status, and the evaluator that applies the gates.

Every change is persisted and audited through :meth:`Router.commit` before it takes effect, so a
restart finds the model at the step it was at. Starting a rollout pins the model's default to its
``stable`` label (the current default unless told otherwise), so that loading a newer version never
sends it traffic by itself; promotion moves ``stable`` to the candidate, a rollback leaves it.
The evaluator is a daemon thread started when a rollout is active, ticking every
``routing.evaluate_every_s``; it never runs on the event loop.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from pydantic import ValidationError

from servelab.core.routing.policy import RolloutSpec, validation_message
from servelab.core.routing.rollout import CANARY, STABLE, Decision, Rollout, RolloutState, Status
from servelab.core.routing.router import Router
from servelab.errors import AlreadyExists, InvalidArgument, NotFound

__all__ = ["ACTIONS", "RolloutControl"]

log = logging.getLogger("servelab.routing")

#: what `servelab rollout <action>` and the API accept besides start and status
ACTIONS = ("pause", "resume", "abort", "promote")


def parse_spec(body: dict[str, Any]) -> RolloutSpec:
    try:
        return RolloutSpec.model_validate(body)
    except ValidationError as exc:
        raise InvalidArgument(validation_message(exc, "rollout")) from None


class RolloutControl:
    """The management side of a router's rollouts."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self._lock = threading.RLock()  # commit() calls back into ensure_evaluator
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        router.on_active = self.ensure_evaluator
        for model, rollout in router.rollouts.items():
            if rollout.state.status.active:
                router.store.audit(model, "resumed", {"step": rollout.state.step, "percent": rollout.state.percent,
                                                      "reason": "server restarted; the step's windows start empty"})
                self.ensure_evaluator()

    # ----- the actions -----
    def start(self, model: str, body: dict[str, Any]) -> dict[str, Any]:
        spec = parse_spec(body)
        router = self.router
        with self._lock:
            current = router.rollouts.get(model)
            if current is not None and current.state.status.active:
                raise AlreadyExists(f"model '{model}' already has a rollout at step {current.state.step} "
                                    f"({current.state.status.value}); abort or finish it first")
            candidate = router.resolve(model, spec.candidate).version
            stable = router.resolve(model, spec.stable).version if spec.stable else self._stable_for(model, candidate)
            if candidate == stable:
                raise InvalidArgument(f"rollout of '{model}': candidate and stable are both version {stable}; "
                                      "name a candidate other than the version serving now")
            state = RolloutState(model, stable, candidate, spec)
            router.rollouts[model] = Rollout(state, router.settings.window_samples)
            routing = router.routing_of(model)
            routing.labels[STABLE] = stable
            routing.default = STABLE
            router.commit(model, "start", {"stable": stable, "candidate": candidate, "steps": spec.percents(),
                                           "by": "operator"})
        return self.status(model)

    def _stable_for(self, model: str, candidate: int) -> int:
        """Today's default version; when that is the candidate itself (it is the newest and nothing pins the
        default), the newest other version serving."""
        default = self.router.resolve(model).version
        if default != candidate:
            return default
        others = [v for v in self.router.registry.serving(model) if v != candidate]
        if not others:
            raise InvalidArgument(f"rollout of '{model}': version {candidate} is the only one loaded; load the "
                                  "stable version beside it (version_policy) or name it with 'stable'")
        return max(others)

    def act(self, model: str, action: str) -> dict[str, Any]:
        """pause | resume | abort | promote (promote: the next step now, or finish at the last one)."""
        if action not in ACTIONS:
            raise InvalidArgument(f"rollout action {action!r}: expected one of {list(ACTIONS)}")
        with self._lock:
            rollout = self._active(model)
            state = rollout.state
            if action == "pause":
                state.status = Status.PAUSED
                self.router.commit(model, "pause", {"step": state.step, "by": "operator"})
            elif action == "resume":
                state.status = Status.RUNNING
                self.router.commit(model, "resume", {"step": state.step, "by": "operator"})
            elif action == "abort":
                self._apply(model, rollout, Decision("abort", "aborted by the operator"))
            else:
                last = state.step == len(state.spec.percents()) - 1
                self._apply(model, rollout, Decision("promote" if last else "advance", "by the operator"))
        return self.status(model)

    def set_default(self, model: str, version: str | None) -> None:
        """Pin the default version or label of ``model`` (TorchServe's set-default). None unpins it, except
        under a rollout (whose ``stable`` pin stays) or when nothing is pinned: then nothing changes."""
        with self._lock:
            rollout = self.router.rollouts.get(model)
            active = rollout is not None and rollout.state.status.active
            if version is None:
                routing = self.router.persisted.get(model)
                if active or routing is None or routing.default is None:
                    return
            elif active:
                raise InvalidArgument(f"model '{model}' has a rollout in progress: its traffic follows the rollout; "
                                      "promote or abort it first")
            else:
                self.router.resolve(model, version)  # NotFound for a version or label it does not have
            self.router.routing_of(model).default = version
            self.router.commit(model, "set_default", {"default": version, "by": "operator"})

    def _active(self, model: str) -> Rollout:
        rollout = self.router.rollouts.get(model)
        if rollout is None or not rollout.state.status.active:
            self.router.registry.serving(model)  # an unknown model is NotFound as such
            raise NotFound(f"model '{model}' has no rollout in progress; start one with `servelab rollout start`")
        return rollout

    def _apply(self, model: str, rollout: Rollout, decision: Decision) -> None:
        """Carry out one decision (caller holds the lock)."""
        state, router = rollout.state, self.router
        detail: dict[str, Any] = {"reason": decision.reason, "from_step": state.step,
                                  "gates": [g.as_dict() for g in rollout.last_gates or rollout.gates()]}
        if decision.action == "advance":
            rollout.advance()
            detail.update(step=state.step, percent=state.percent)
        elif decision.action == "promote":
            rollout.finish(Status.PROMOTED, decision.reason)
            routing = router.routing_of(model)
            routing.labels[STABLE] = state.candidate
            routing.default = STABLE
            detail.update(stable=state.candidate)
        elif decision.action == "rollback":
            rollout.finish(Status.ROLLED_BACK, decision.reason)
            detail.update(stable=state.stable)
        else:
            rollout.finish(Status.ABORTED, decision.reason)
            detail.update(stable=state.stable)
        router.commit(model, {"rollback": "rolled_back", "abort": "aborted"}.get(decision.action, decision.action),
                      detail)

    # ----- the evaluator -----
    def evaluate_once(self) -> None:
        """Evaluate every active rollout once and apply what it decides."""
        for model, rollout in list(self.router.rollouts.items()):
            with self._lock:
                if not rollout.state.status.active:
                    continue
                decision = rollout.evaluate()
                if decision is not None:
                    self._apply(model, rollout, decision)

    def ensure_evaluator(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="servelab-rollouts", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        every = self.router.settings.evaluate_every_s
        while not self._stop.wait(every):
            try:
                self.evaluate_once()
            except Exception:  # the evaluator must outlive a bad evaluation
                log.exception("evaluating rollouts failed")
            with self._lock:  # exit only when nothing is active, decided where a start would restart it
                if not any(r.state.status.active for r in self.router.rollouts.values()):
                    self._thread = None
                    return

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # ----- what the API and the CLI show -----
    def status(self, model: str) -> dict[str, Any]:
        """One consistent document: read under the lock the decisions take, never between two of their parts."""
        with self._lock:
            return self._status(model)

    def _status(self, model: str) -> dict[str, Any]:
        router = self.router
        lv = router.resolve(model)
        table = router.table(model)
        rollout = router.rollouts.get(model)
        out: dict[str, Any] = {
            "model": model,
            "default_version": lv.version,
            "labels": router.labels(model),
            "split": [{"variant": a.name, "model": a.target.model, "version": a.target.version, "weight": a.weight}
                      for a in (table.arms if table is not None else ())],
            "variants": [{"variant": s.variant, "model": s.target_model, "version": s.version,
                          "requests": s.requests, "errors": s.errors}
                         for s in router.variant_stats() if s.model == model],
            "shadow": table.shadow.comparison.summary() if table is not None and table.shadow is not None else None,
            "rollout": _rollout_view(rollout) if rollout is not None else None,
            "history": router.store.history(model),
        }
        return out


def _rollout_view(rollout: Rollout) -> dict[str, Any]:
    state = rollout.state
    active = state.status.active
    gates = rollout.gates() if active else rollout.last_gates
    stable, candidate = rollout.stable.snapshot(), rollout.candidate.snapshot()
    return {
        **state.as_dict(),
        "percent": state.percent,
        "steps": state.spec.percents(),
        "shadow_step": state.shadow_step,
        "step_elapsed_s": time.monotonic() - rollout.step_started if active else None,
        "gates": [g.as_dict() for g in gates],
        "window": {STABLE: {"requests": stable.requests, "errors": stable.errors, "p99_ms": stable.p99_ms()},
                   CANARY: {"requests": candidate.requests, "errors": candidate.errors, "p99_ms": candidate.p99_ms()}},
        "comparison": rollout.comparison.summary() if rollout.comparison is not None else None,
    }
