"""Routing's building blocks without a server: sticky choice, the policy schema, the rollout state machine
(on a fake clock), the sqlite store and the bounded shadow pool."""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest

from servelab.core.routing import Gates, RolloutSpec, RoutingPolicy, RoutingStore
from servelab.core.routing.choice import pick_random, pick_sticky, unit_hash
from servelab.core.routing.gates import evaluate_gates
from servelab.core.routing.policy import read_policy
from servelab.core.routing.rollout import Rollout, RolloutState, Status
from servelab.core.routing.shadow import ShadowPool
from servelab.core.routing.store import ModelRouting
from servelab.core.routing.windows import SideWindow, compare_outputs
from servelab.errors import InvalidArgument

ARMS = ("stable", "canary")


# ----- choice -----
def test_a_key_always_takes_the_same_arm_and_the_hash_is_not_pythons() -> None:
    assert unit_hash("canary", "user-1") == unit_hash("canary", "user-1")
    assert unit_hash("canary", "user-1") != unit_hash("stable", "user-1")
    assert 0 < unit_hash("a", "") < 1
    # a fixed value: the same in every process and replica (blake2b, never Python's salted hash())
    assert unit_hash("canary", "user-42") == pytest.approx(0.877912, abs=1e-6)


@pytest.mark.parametrize("share", [0.05, 0.2, 0.5])
def test_sticky_shares_follow_the_weights(share: float) -> None:
    n = 20_000
    on = sum(pick_sticky(ARMS, (1 - share, share), f"k{i}") == 1 for i in range(n))
    sigma = math.sqrt(n * share * (1 - share))
    assert abs(on - n * share) < 5 * sigma, (on, n * share)


def test_raising_the_canary_weight_only_moves_keys_to_the_canary() -> None:
    keys = [f"user-{i}" for i in range(5000)]
    at = {s: {k for k in keys if pick_sticky(ARMS, (1 - s, s), k) == 1} for s in (0.05, 0.2, 1.0)}
    assert at[0.05] <= at[0.2] <= at[1.0] == set(keys)
    assert not {k for k in keys if pick_sticky(ARMS, (1.0, 0.0), k) == 1}


def test_random_choice_by_cumulative_weights() -> None:
    rng = random.Random(7)
    counts = [0, 0, 0]
    for _ in range(30_000):
        counts[pick_random((1.0, 3.0, 4.0), rng)] += 1
    assert [round(c / 30_000, 2) for c in counts] == pytest.approx([0.25, 0.5, 0.25], abs=0.02)


# ----- the policy file and the rollout spec -----
def test_policy_file_errors_name_the_field(tmp_path: Path) -> None:
    (tmp_path / "routing.yaml").write_text("labels: {1st: 1}\n")
    with pytest.raises(InvalidArgument, match=r"routing.yaml: labels: .*'1st' must start with a letter"):
        read_policy(tmp_path, "m")
    (tmp_path / "routing.yaml").write_text("split: [{version: 1, weight: 0}]\nsurprise: 1\n")
    with pytest.raises(InvalidArgument, match=r"split: .*weights sum to 0.*surprise: Extra inputs"):
        read_policy(tmp_path, "m")
    (tmp_path / "routing.json").write_text("{}")
    with pytest.raises(InvalidArgument, match="both routing.yaml and routing.json"):
        read_policy(tmp_path, "m")
    (tmp_path / "routing.yaml").unlink()
    assert read_policy(tmp_path, "m") == RoutingPolicy()
    assert read_policy(tmp_path / "nothing-here", "m") is None


def test_policy_names_every_version_it_uses() -> None:
    policy = RoutingPolicy.model_validate({
        "default": "3", "labels": {"stable": 1}, "shadow": {"version": 4},
        "split": [{"version": 1, "weight": 1}, {"model": "other", "version": 9, "weight": 1}],
    })
    assert policy.versions_named() == {"labels.stable": 1, "default": 3, "split[0].version": 1, "shadow.version": 4}


@pytest.mark.parametrize(("steps", "message"), [
    ([20, 5, 100], "must increase"), ([5, 20], "must end at 100"), ([0, 100], r"percent in \(0, 100\]"),
])
def test_rollout_steps_are_checked(steps: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RolloutSpec(candidate="2", steps=steps)
    assert RolloutSpec(candidate="2", shadow=True).percents() == [0.0, 5.0, 20.0, 100.0]


# ----- the state machine on a fake clock -----
def _rollout(**spec: object) -> Rollout:
    defaults: dict[str, object] = {"candidate": "2", "min_dwell_s": 10, "min_requests": 5, "agreement_sample": 0.0,
                                   "gates": Gates(min_samples=5)}
    state = RolloutState("m", 1, 2, RolloutSpec.model_validate({**defaults, **spec}))
    return Rollout(state, capacity=1000, now=0.0)


def _feed(rollout: Rollout, n: int, stable_s: float, canary_s: float, canary_ok: bool = True) -> None:
    for _ in range(n):
        rollout.stable.record(True, stable_s)
        rollout.candidate.record(canary_ok, canary_s)


def test_a_step_waits_for_its_dwell_time_and_requests_then_advances_then_promotes() -> None:
    rollout = _rollout()
    _feed(rollout, 3, 0.001, 0.001)
    assert rollout.evaluate(now=11.0) is None  # 3 of 5 requests: no gate can decide yet
    _feed(rollout, 10, 0.001, 0.001)
    assert rollout.evaluate(now=5.0) is None  # dwell not reached
    decision = rollout.evaluate(now=11.0)
    assert decision is not None and decision.action == "advance" and "step 0 (5%) passed" in decision.reason
    rollout.advance(now=11.0)
    assert rollout.state.step == 1 and rollout.share == 0.2 and rollout.candidate.snapshot().requests == 0
    for step in (1, 2):
        _feed(rollout, 10, 0.001, 0.001)
        decision = rollout.evaluate(now=11.0 + 11 * step)
        assert decision is not None
        if step == 2:
            assert decision.action == "promote"
        else:
            rollout.advance(now=11.0 + 11 * step)


def test_a_slower_candidate_is_rolled_back_with_the_p99_reason_even_when_paused() -> None:
    rollout = _rollout()
    rollout.state.status = Status.PAUSED
    _feed(rollout, 20, 0.010, 0.0104)  # +4%: within the default 5%
    assert rollout.evaluate(now=1.0) is None
    _feed(rollout, 20, 0.010, 0.020)
    assert rollout.evaluate(now=1.0) is None  # 1.9x its bound: decided when the step ends, not on its first samples
    gate = rollout.last_gates[1]
    assert gate.passed is None and "decided when the step ends" in gate.detail
    decision = rollout.evaluate(now=11.0)  # dwell time and requests reached (paused or not)
    assert decision is not None and decision.action == "rollback"
    assert "gate p99_ms failed" in decision.reason and "vs stable" in decision.reason


def test_a_candidate_over_twice_its_p99_bound_is_rolled_back_before_the_step_ends() -> None:
    rollout = _rollout()
    _feed(rollout, 20, 0.010, 0.0215)  # bound 10.5 ms: 2.05x
    decision = rollout.evaluate(now=1.0)
    assert decision is not None and decision.action == "rollback" and "gate p99_ms failed" in decision.reason


def test_the_p99_gate_compares_both_sides_over_the_same_span() -> None:
    """A burst slowed both sides; stable's newest samples (its window holds 100) are all after it, the 5%
    candidate's window still holds the burst. Over the same span both are fast: an identical candidate passes."""
    stable, candidate = SideWindow(100), SideWindow(100)
    for _ in range(50):  # the burst: both slow
        stable.record(True, 0.020)
        candidate.record(True, 0.020)
    for i in range(200):  # quiet again: stable's window is now all quiet, the candidate's mostly burst
        stable.record(True, 0.001)
        if i % 20 == 0:
            candidate.record(True, 0.001)
    gates = Gates(min_samples=5)
    whole = candidate.snapshot().p99_ms()
    assert whole is not None and whole > 15  # what the gate compared before: 20 ms against stable's 1 ms
    p99 = evaluate_gates(gates, stable.snapshot(), candidate.snapshot(), None)[1]
    assert p99.passed is True and p99.value == pytest.approx(1.0) and "over the same" in p99.detail
    candidate.record(True, 0.005)  # a slow answer of the candidate alone, within that span, still counts
    for _ in range(9):
        candidate.record(True, 0.001)
    p99 = evaluate_gates(gates, stable.snapshot(), candidate.snapshot(), None)[1]
    assert p99.passed is False and p99.value is not None and p99.value > 2


def test_errors_and_wrong_outputs_fail_their_gates() -> None:
    failing = _rollout()
    _feed(failing, 10, 0.001, 0.001, canary_ok=False)
    decision = failing.evaluate(now=1.0)
    assert decision is not None and "gate error_rate failed: 10 errors in 10" in decision.reason
    wrong = _rollout(agreement_sample=0.5)
    assert wrong.comparison is not None
    wrong.comparison.record(*compare_outputs({"y": np.ones((1, 3))}, {"y": np.full((1, 3), 1.5)}), 0.001, 0.001)
    decision = wrong.evaluate(now=1.0)  # one wrong answer is enough: no statistics needed
    assert decision is not None and "gate max_abs_diff failed: outputs differ by up to 0.5" in decision.reason


def test_outputs_compare_by_difference_and_top1() -> None:
    a = np.array([[0.1, 0.9], [0.8, 0.2]], np.float32)
    assert compare_outputs({"y": a}, {"y": a}) == (0.0, 2, 2)
    diff, agree, rows = compare_outputs({"y": a}, {"y": a[:, ::-1]})
    assert diff == pytest.approx(0.8) and (agree, rows) == (0, 2)
    assert compare_outputs({"y": a}, {"z": a})[0] == math.inf
    assert compare_outputs({"y": a}, {"y": a[:1]})[0] == math.inf
    text = np.array([b"a", b"b"], dtype=object)
    assert compare_outputs({"t": text}, {"t": text.copy()})[0] == 0.0


# ----- persistence -----
def test_the_store_keeps_routing_and_the_audit_log_across_connections(tmp_path: Path) -> None:
    db = tmp_path / "state" / "routing.sqlite"
    store = RoutingStore(db)
    state = RolloutState("m", 1, 2, RolloutSpec(candidate="2", shadow=True), step=2, status=Status.PAUSED)
    store.save("m", ModelRouting("stable", {"stable": 1}, state))
    store.audit("m", "advance", {"step": 2, "reason": "gates passed"})
    store.close()
    again = RoutingStore(db)
    routing = again.load_all()["m"]
    assert routing.default == "stable" and routing.labels == {"stable": 1}
    assert routing.rollout is not None and routing.rollout.as_dict() == state.as_dict()
    assert routing.rollout.percent == 20.0  # step 2 of [0, 5, 20, 100]: never 100 by itself
    assert [(h["event"], h["step"]) for h in again.history("m")] == [("advance", 2)]
    again.close()


# ----- the shadow pool -----
def test_past_its_capacity_the_shadow_pool_sheds_and_never_waits() -> None:
    pool = ShadowPool(threads=1, capacity=2)
    release = threading.Event()
    ran: list[int] = []

    def held() -> None:
        release.wait(30)
        ran.append(1)

    try:
        assert pool.submit(held)
        assert pool.submit(lambda: ran.append(2))
        assert not pool.submit(lambda: ran.append(3))  # full: shed at once, the caller goes on
        assert pool.shed == 1 and pool.in_flight == 2
        release.set()
        deadline = time.monotonic() + 30
        while pool.in_flight and time.monotonic() < deadline:  # the two copies finish in the pool's thread
            time.sleep(0.01)
        done = threading.Event()
        assert pool.submit(done.set) and done.wait(30)  # drained: a later copy is accepted again
        assert ran == [1, 2]
    finally:
        release.set()
        pool.close()


def test_top1_agreement_gate_passes_on_the_same_argmax_and_fails_below_its_threshold() -> None:
    rollout = _rollout(agreement_sample=1.0, gates=Gates(min_samples=2, min_top1_agreement=0.9, p99_slack_ms=100))
    assert rollout.comparison is not None
    scores = np.array([[0.1, 0.9], [0.7, 0.3]], np.float32)
    for _ in range(2):
        rollout.comparison.record(*compare_outputs({"y": scores}, {"y": scores * 1.5}), 0.001, 0.001)
    _feed(rollout, 10, 0.001, 0.001)
    gate = rollout.gates()[-1]
    assert (gate.name, gate.value, gate.passed) == ("top1_agreement", 1.0, True)  # values differ, top-1 agrees
    rollout.comparison.record(*compare_outputs({"y": scores}, {"y": scores[:, ::-1]}), 0.001, 0.001)
    decision = rollout.evaluate(now=1.0)
    assert decision is not None and "gate top1_agreement failed: top-1 agrees on 4 of 6 rows" in decision.reason


def test_at_100_percent_stable_s_last_window_stays_the_p99_baseline() -> None:
    rollout = _rollout(steps=[50, 100], min_dwell_s=0)
    _feed(rollout, 10, 0.010, 0.010)
    decision = rollout.evaluate(now=1.0)
    assert decision is not None and decision.action == "advance"
    rollout.advance(now=1.0)
    assert rollout.share == 1.0 and rollout.stable.snapshot().requests == 10  # kept: no live stable traffic now
    for _ in range(10):
        rollout.candidate.record(True, 0.050)
    decision = rollout.evaluate(now=2.0)
    assert decision is not None and decision.action == "rollback" and "p99_ms" in decision.reason


def test_on_an_event_loop_copies_run_on_that_loop_after_the_ready_requests() -> None:
    """Copies from the servers' loop run there (no thread fighting the loop for the GIL), one per turn per
    drainer, after the callbacks already ready; past the capacity they are shed; close drops the waiting."""
    pool = ShadowPool(threads=1, capacity=3)
    order: list[str] = []
    loop_thread: list[int] = []

    def in_thread() -> None:
        raise AssertionError("a copy submitted on a loop must not run in the executor")

    def copy(tag: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            loop_thread.append(threading.get_ident())
            order.append(tag)
        return run

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        assert pool.submit(in_thread, copy("c1")) and pool.submit(in_thread, copy("c2"))
        loop.call_soon(order.append, "ready request")
        assert pool.submit(in_thread, copy("c3"))
        assert not pool.submit(in_thread, copy("c4"))  # full: shed at once
        while pool.in_flight:
            await asyncio.sleep(0)
        assert pool.submit(in_thread, copy("c5"))
        pool.close()
        for _ in range(5):
            await asyncio.sleep(0)

    try:
        asyncio.run(scenario())
        assert order[0] == "ready request" and order[1:] == ["c1", "c2", "c3"]
        assert set(loop_thread) == {threading.get_ident()} and pool.shed == 1 and pool.in_flight == 0
    finally:
        pool.close()


def test_a_cold_version_is_counted_but_not_timed_for_the_p99_gate() -> None:
    """Until a version has run COLD_EXECUTIONS times its serve times (pool hops before its scheduler runs it
    inline, first allocations) are not judged: the soak's good candidate was rolled back on them."""
    from types import SimpleNamespace

    from servelab.core.routing.outcomes import COLD_EXECUTIONS, _warm
    from servelab.core.stats import ModelStats

    stats = ModelStats("m", 2)
    version = SimpleNamespace(stats=stats)
    assert _warm(version, 0.5) is None  # type: ignore[arg-type]
    for _ in range(COLD_EXECUTIONS):
        stats.record_execution(1, 1, 0, 0, 0)
    assert _warm(version, 0.5) == 0.5  # type: ignore[arg-type]
