"""Property tests: whatever the row counts, split(batch(requests)) gives each request its own rows,
through the timed execution path and through the dynamic batcher; and the queue's plan obeys the
batching rules for any queue content."""

from __future__ import annotations

import asyncio

import numpy as np
from batching_testutil import FEATURES, config, doubling, stats
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.backends.base import concat_rows, split_rows
from servelab.core.batching import BatchPolicy, make_scheduler
from servelab.core.batching._queue import Pending, RequestQueue

row_counts = st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=12)


def _requests(counts: list[int]) -> list[dict[str, np.ndarray]]:
    # each row carries its request index and row index, so a misplaced row is visible
    return [
        {"x": np.array([[i, r, 0, 0] for r in range(n)], dtype=np.float32)} for i, n in enumerate(counts)
    ]


@given(row_counts)
def test_split_of_concat_returns_each_requests_rows(counts: list[int]) -> None:
    requests = _requests(counts)
    batch, rows = concat_rows(requests)
    assert rows == counts and batch["x"].shape == (sum(counts), FEATURES)
    for request, part in zip(requests, split_rows(batch, rows), strict=True):
        np.testing.assert_array_equal(part["x"], request["x"])


@given(row_counts)
@settings(max_examples=60, deadline=None)
def test_timed_execution_returns_each_requests_answer(counts: list[int]) -> None:
    backend = doubling(config(max_batch_size=64))[0]
    requests = _requests(counts)
    results = backend.execute_timed(requests).results
    assert backend.calls == 1
    for request, result in zip(requests, results, strict=True):
        assert isinstance(result, dict)
        np.testing.assert_array_equal(result["y"], 2 * request["x"])


@given(row_counts)
@settings(max_examples=25, deadline=None)
def test_batcher_answers_each_request_with_its_own_rows(counts: list[int]) -> None:
    cfg = config(max_batch_size=8, delay_us=2_000)
    backends = doubling(cfg)
    batcher = make_scheduler(backends, stats(), cfg)
    requests = _requests([min(c, 8) for c in counts])

    async def main() -> list[dict[str, np.ndarray]]:
        return await asyncio.gather(*(batcher.run_async(r) for r in requests))

    try:
        outs = asyncio.run(main())
    finally:
        batcher.close()
    for request, out in zip(requests, outs, strict=True):
        np.testing.assert_array_equal(out["y"], 2 * request["x"])
    assert all(n <= 8 for n in backends[0].batches)
    assert sum(backends[0].batches) == sum(len(r["x"]) for r in requests)


def _queue(policy: BatchPolicy, counts: list[int]) -> RequestQueue:
    q = RequestQueue(policy)
    for i, n in enumerate(counts):
        q.push(Pending({}, n, (), 1, i, 0, True, lambda r: None))
    return q


@given(
    row_counts,
    st.integers(min_value=1, max_value=16),
    st.sets(st.integers(min_value=1, max_value=16), max_size=3),
)
def test_plan_respects_max_and_preferred_sizes(counts: list[int], max_batch: int, preferred: set[int]) -> None:
    cfg = config(max_batch_size=max_batch, delay_us=0, preferred=tuple(p for p in preferred if p <= max_batch))
    policy = BatchPolicy.from_config(cfg)
    counts = [min(c, max_batch) for c in counts]
    plan = _queue(policy, counts).plan()
    assert plan.count >= 1 and plan.rows == sum(counts[: plan.count])
    assert plan.rows <= max_batch
    if plan.count < len(counts):
        assert plan.full  # stopped only because the next request did not fit
    if plan.preferred_count:
        assert sum(counts[: plan.preferred_count]) in policy.preferred
    taken = _queue(policy, counts).take(plan.count)
    assert [p.rows for p in taken] == counts[: plan.count]
