"""The dynamic batcher, in the manner of Ray Serve's batching tests: delays, sizes, order, priorities,
timeouts, cancellation, error fan-out and overload. Where a test needs an instance busy, a request
starting with HOLD waits at a ThreadGate until the test opens it (no guessed durations); every answer
is checked against the unbatched one (y = 2x)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import numpy as np
import pytest
from batching_testutil import HOLD, config, doubling, rows, stats

from harness.gates import ThreadGate
from servelab.core.batching import DynamicBatcher, make_scheduler
from servelab.errors import InvalidArgument, ResourceExhausted, Unavailable


@pytest.fixture
def batchers() -> Iterator[list[DynamicBatcher]]:
    made: list[DynamicBatcher] = []
    yield made
    for b in made:
        b.close()


def build(made: list[DynamicBatcher], n: int = 1, gate: ThreadGate | None = None, **cfg: Any) -> DynamicBatcher:
    c = config(**cfg)
    b = make_scheduler(doubling(c, n, gate), stats(), c)
    assert isinstance(b, DynamicBatcher)
    made.append(b)
    return b


def run(coro: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(coro())  # type: ignore[arg-type]


def batches(b: DynamicBatcher) -> list[int]:
    return [n for backend in b.backends for n in backend.batches]  # type: ignore[attr-defined]


def test_concurrent_requests_merge_up_to_max_batch_size(batchers: list[DynamicBatcher]) -> None:
    b = build(batchers, max_batch_size=8, delay_us=100_000)
    xs = [rows(1, seed=i) for i in range(20)]

    async def main() -> list[dict[str, np.ndarray]]:
        return await asyncio.gather(*(b.run_async({"x": x}) for x in xs))

    outs = run(main)
    for x, out in zip(xs, outs, strict=True):
        np.testing.assert_array_equal(out["y"], 2 * x)
    assert batches(b) == [8, 8, 4]
    s = b.stats.as_dict()
    assert s["execution_count"] == 3 and s["inference_count"] == 20
    assert s["inference_stats"]["queue"]["count"] == 20
    assert {e["batch_size"] for e in s["batch_stats"]} == {8, 4}
    assert b.histograms.batch_size.count == 3 and b.histograms.request.count == 20


def test_a_request_is_never_split(batchers: list[DynamicBatcher]) -> None:
    b = build(batchers, max_batch_size=8, delay_us=100_000)
    xs = [rows(3, seed=i) for i in range(3)]

    async def main() -> list[dict[str, np.ndarray]]:
        return await asyncio.gather(*(b.run_async({"x": x}) for x in xs))

    for x, out in zip(xs, run(main), strict=True):
        np.testing.assert_array_equal(out["y"], 2 * x)
    assert batches(b) == [6, 3]


def test_max_queue_delay_is_honoured(batchers: list[DynamicBatcher]) -> None:
    waiting = build(batchers, max_batch_size=8, delay_us=150_000)
    eager = build(batchers, max_batch_size=8, delay_us=0)
    t0 = time.perf_counter()
    waiting.run({"x": rows(1)})
    waited = time.perf_counter() - t0
    t0 = time.perf_counter()
    eager.run({"x": rows(1)})
    immediate = time.perf_counter() - t0
    assert 0.14 <= waited < 1.0
    assert immediate < 0.1


def test_a_full_batch_does_not_wait_for_the_delay(batchers: list[DynamicBatcher]) -> None:
    b = build(batchers, max_batch_size=4, delay_us=5_000_000)

    async def main() -> None:
        await asyncio.gather(*(b.run_async({"x": rows(1, seed=i)}) for i in range(4)))

    t0 = time.perf_counter()
    run(main)
    assert time.perf_counter() - t0 < 2.0
    assert batches(b) == [4]


def test_batches_cut_at_the_largest_preferred_size(batchers: list[DynamicBatcher]) -> None:
    b = build(batchers, max_batch_size=16, delay_us=100_000, preferred=(2, 4))

    async def main() -> None:
        await asyncio.gather(*(b.run_async({"x": rows(1, seed=i)}) for i in range(7)))

    run(main)
    # 4 is reached at once; the 3 left wait the delay and are cut at the preferred 2, then 1
    assert batches(b) == [4, 2, 1]


def test_requests_of_different_shapes_do_not_share_a_batch(batchers: list[DynamicBatcher]) -> None:
    b = build(batchers, max_batch_size=8, delay_us=100_000)
    a, c = np.ones((1, 4), np.float32), np.ones((1, 5), np.float32)

    async def main() -> list[dict[str, np.ndarray]]:
        return await asyncio.gather(b.run_async({"x": a}), b.run_async({"x": a}), b.run_async({"x": c}))

    outs = run(main)
    assert [o["y"].shape for o in outs] == [(1, 4), (1, 4), (1, 5)]
    assert batches(b) == [2, 1]  # a shape change ends the batch (one concatenate per input)


HELD = rows(1, value=HOLD)  # waits at the gate
FREE = rows(1, value=0.0)  # does not


async def _step() -> None:
    """One pass of the event loop: tasks created before it have submitted their requests."""
    await asyncio.sleep(0)


async def _submit(b: DynamicBatcher, x: np.ndarray, params: dict[str, Any] | None = None) -> asyncio.Task[Any]:
    task = asyncio.create_task(b.run_async({"x": x}, params or {}))
    await _step()
    return task


async def _hold_instance(b: DynamicBatcher, gate: ThreadGate, count: int = 1) -> asyncio.Task[Any]:
    """A request that occupies an instance until ``gate`` opens (returned once it is executing)."""
    blocker = await _submit(b, HELD)
    await gate.entered_async(count)
    return blocker


def _completion_order(b: DynamicBatcher, gate: ThreadGate, plan: list[tuple[str, np.ndarray, dict[str, Any]]],
                      before_open: Callable[[], Awaitable[None]] | None = None) -> list[str]:
    """The order in which a blocker (held at ``gate``) and then ``plan`` complete, ``plan`` queued
    behind the blocker; ``before_open`` runs while everything waits."""
    order: list[str] = []

    async def one(name: str, x: np.ndarray, params: dict[str, Any]) -> None:
        await b.run_async({"x": x}, params)
        order.append(name)

    async def main() -> None:
        tasks = [asyncio.create_task(one("blocker", HELD, {}))]
        await gate.entered_async()
        for name, x, params in plan:
            tasks.append(asyncio.create_task(one(name, x, params)))
            await _step()
        if before_open is not None:
            await before_open()
        gate.open()
        await asyncio.gather(*tasks)

    run(main)
    return order


@pytest.mark.parametrize("preserve", [False, True])
def test_preserve_ordering_hands_results_back_in_batch_order(
    batchers: list[DynamicBatcher], preserve: bool
) -> None:
    gate = ThreadGate()
    b = build(batchers, n=2, gate=gate, max_batch_size=1, delay_us=0, preserve_ordering=preserve)

    async def main() -> list[str]:
        order: list[str] = []
        slow = await _hold_instance(b, gate)  # formed first, held on one instance
        slow.add_done_callback(lambda _: order.append("slow"))
        fast = await _submit(b, FREE)  # formed second, runs at once on the other
        fast.add_done_callback(lambda _: order.append("fast"))
        await gate.passed_async()  # fast has been computed
        if preserve:
            done, _ = await asyncio.wait({fast}, timeout=0.3)
            assert not done, "fast was handed back before the batch formed ahead of it"
        else:
            await asyncio.wait_for(asyncio.shield(fast), timeout=30)  # back while slow is still held
        gate.open()
        await asyncio.gather(slow, fast)
        return order

    assert run(main) == (["slow", "fast"] if preserve else ["fast", "slow"])


def test_higher_priority_is_served_first(batchers: list[DynamicBatcher]) -> None:
    gate = ThreadGate()
    b = build(batchers, gate=gate, max_batch_size=1, delay_us=0, priority_levels=2, default_priority=2)
    order = _completion_order(b, gate, [
        ("low-1", FREE, {}),
        ("low-2", FREE, {"priority": 2}),
        ("high", FREE, {"priority": 1}),
        ("out-of-range", FREE, {"priority": 9}),  # Triton: falls back to the default level
    ])
    assert order == ["blocker", "high", "low-1", "low-2", "out-of-range"]


def test_queue_timeout_rejects_without_waiting_for_the_instance(batchers: list[DynamicBatcher]) -> None:
    gate = ThreadGate()
    b = build(batchers, gate=gate, max_batch_size=1, delay_us=0, timeout_us=200_000)

    async def main() -> None:
        blocker = await _hold_instance(b, gate)
        with pytest.raises(Unavailable, match="timed out in the queue"):
            await asyncio.wait_for(b.run_async({"x": FREE}), timeout=30)  # while the instance is still held
        gate.open()
        await blocker

    run(main)
    assert batches(b) == [1]  # the timed-out request never ran
    assert b.pending == 0 and b.in_flight == 0


def test_per_request_timeout_applies_when_override_is_allowed(batchers: list[DynamicBatcher]) -> None:
    gate = ThreadGate()
    b = build(batchers, gate=gate, max_batch_size=1, delay_us=0, allow_override=True)

    async def main() -> None:
        blocker = await _hold_instance(b, gate)
        with pytest.raises(Unavailable, match="timed out in the queue"):
            await asyncio.wait_for(b.run_async({"x": FREE}, {"timeout": 30_000}), timeout=30)
        gate.open()
        await blocker

    run(main)


def test_per_request_timeout_is_ignored_when_override_is_not_allowed(batchers: list[DynamicBatcher]) -> None:
    gate = ThreadGate()
    b = build(batchers, gate=gate, max_batch_size=1, delay_us=0, allow_override=False)

    async def main() -> bool:
        blocker = await _hold_instance(b, gate)
        waiting = await _submit(b, FREE, {"timeout": 30_000})
        await asyncio.wait({waiting}, timeout=0.3)  # ten times the 30 ms it asked for
        still_waiting = not waiting.done()
        gate.open()
        await asyncio.gather(blocker, waiting)
        return still_waiting

    assert run(main) is True


def test_delay_action_moves_a_timed_out_request_behind_its_level(batchers: list[DynamicBatcher]) -> None:
    gate = ThreadGate()
    b = build(batchers, gate=gate, max_batch_size=1, delay_us=0, allow_override=True, delay_action=True)

    async def past_the_timeout() -> None:
        # the 20 ms timer of "impatient" runs on this loop, before a later timer of the same loop
        await asyncio.sleep(0.1)

    order = _completion_order(b, gate, [
        ("impatient", FREE, {"timeout": 20_000}),
        ("patient", FREE, {}),
    ], before_open=past_the_timeout)
    assert order == ["blocker", "patient", "impatient"]


def test_a_cancelled_request_is_dropped_from_the_queue(batchers: list[DynamicBatcher]) -> None:
    gate = ThreadGate()
    b = build(batchers, gate=gate, max_batch_size=8, delay_us=0)

    async def main() -> None:
        blocker = await _hold_instance(b, gate)
        gone = await _submit(b, rows(5, value=0.0))
        stays = await _submit(b, rows(2, value=0.0))
        assert b.pending == 2
        gone.cancel()  # the client disconnected
        await _step()
        assert b.pending == 1
        gate.open()
        await asyncio.gather(blocker, stays)
        assert gone.cancelled()

    run(main)
    assert batches(b) == [1, 2]
    assert b.in_flight == 0


def test_a_bad_request_fails_alone(batchers: list[DynamicBatcher]) -> None:
    b = build(batchers, max_batch_size=8, delay_us=100_000)
    xs = [rows(1, seed=i) for i in range(4)]
    xs[2] = rows(1, value=float("nan"))

    async def main() -> list[Any]:
        return await asyncio.gather(*(b.run_async({"x": x}) for x in xs), return_exceptions=True)

    outs = run(main)
    assert isinstance(outs[2], InvalidArgument)
    for i in (0, 1, 3):
        np.testing.assert_array_equal(outs[i]["y"], 2 * xs[i])
    assert batches(b)[0] == 4  # tried as one batch first


def test_overload_is_rejected_at_once(batchers: list[DynamicBatcher]) -> None:
    gate = ThreadGate()
    b = build(batchers, gate=gate, max_batch_size=1, delay_us=0, max_queue_size=2)

    async def main() -> None:
        blocker = await _hold_instance(b, gate)
        queued = [await _submit(b, FREE) for _ in range(2)]
        with pytest.raises(ResourceExhausted, match="max_queue_size"):
            await asyncio.wait_for(b.run_async({"x": FREE}), timeout=30)  # refused while the queue is full
        gate.open()
        await asyncio.gather(blocker, *queued)

    run(main)


def test_sync_callers_from_threads_batch_too(batchers: list[DynamicBatcher]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    b = build(batchers, max_batch_size=8, delay_us=100_000)
    xs = [rows(1, seed=i) for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda x: b.run({"x": x}), xs))
    for x, out in zip(xs, outs, strict=True):
        np.testing.assert_array_equal(out["y"], 2 * x)
    assert batches(b) == [8]


def test_close_fails_what_is_still_queued(batchers: list[DynamicBatcher]) -> None:
    gate = ThreadGate()
    b = build(batchers, gate=gate, max_batch_size=1, delay_us=0)

    async def main() -> None:
        blocker = await _hold_instance(b, gate)
        queued = await _submit(b, FREE)
        closing = asyncio.get_running_loop().run_in_executor(None, b.close)  # waits for the busy instance
        with pytest.raises(Unavailable, match="unloaded"):
            await asyncio.wait_for(queued, timeout=30)
        gate.open()
        await asyncio.gather(blocker, closing)

    run(main)
    with pytest.raises(Unavailable):
        b.run({"x": FREE})


def test_invalid_priority_parameter_is_an_invalid_argument(batchers: list[DynamicBatcher]) -> None:
    b = build(batchers, max_batch_size=4, delay_us=0, priority_levels=2)

    async def main() -> None:
        with pytest.raises(InvalidArgument, match="priority"):
            await b.run_async({"x": rows(1)}, {"priority": "high"})

    run(main)


def test_bad_preferred_size_is_refused() -> None:
    c = config(max_batch_size=4, delay_us=0, preferred=(8,))
    with pytest.raises(ValueError, match="preferred_batch_size"):
        make_scheduler(doubling(c), stats(), c)
