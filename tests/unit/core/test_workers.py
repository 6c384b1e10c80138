"""Real worker processes (``python -m servelab.core.workers``): every datatype through shared memory,
errors per request, calls back into the server, queue time, a killed worker, a stuck one."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
from workers_testutil import HUNG, CallingBackend, EchoBackend, SleepBackend, config, start_worker, wait_for

from servelab.backends.base import Inputs, Outputs
from servelab.core.scheduling import DirectScheduler
from servelab.core.stats import ModelStats
from servelab.errors import InvalidArgument, NotFound, Unavailable

MIB = 1 << 20


def _every_datatype() -> Inputs:
    return {
        "BOOL": np.array([[True, False, True]]),
        "UINT8": np.arange(5, dtype=np.uint8),
        "UINT16": np.array([0, 65535], np.uint16),
        "UINT32": np.array([2**32 - 1], np.uint32),
        "UINT64": np.array([2**64 - 1], np.uint64),
        "INT8": np.array([-128, 127], np.int8),
        "INT16": np.array([-(2**15)], np.int16),
        "INT32": np.arange(-3, 3, dtype=np.int32).reshape(2, 3),
        "INT64": np.array([-(2**63)], np.int64),
        "FP16": np.array([0.5, -65504], np.float16),
        "FP32": np.linspace(0, 1, 7, dtype=np.float32),
        "FP64": np.array(np.pi),  # 0-d
        "BF16": np.array([1.0, -2.5, 3e38], ml_dtypes.bfloat16),
        "BYTES": np.array([[b"", b"\x00\xffbinary"], ["\u00e9t\u00e9".encode(), b"x" * 10_000]], dtype=object),
        "EMPTY": np.zeros((0, 3), np.float32),
        "STRIDED": np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2],
    }


def test_every_datatype_round_trips_through_shared_memory() -> None:
    worker = start_worker(EchoBackend)
    try:
        sent = _every_datatype()
        got = worker.infer(sent)
        assert worker.pid != os.getpid()
        for name, a in sent.items():
            assert got[name].dtype == a.dtype and got[name].shape == a.shape, name
            np.testing.assert_array_equal(got[name], a)
    finally:
        worker.close()


def test_tensors_larger_than_the_arena_grow_it_both_ways() -> None:
    worker = start_worker(EchoBackend, arena_bytes=MIB)
    try:
        for size in (3 * MIB, 9 * MIB, 1024):  # grows twice, then small again
            x = np.random.default_rng(size).integers(0, 255, size, dtype=np.uint8)
            np.testing.assert_array_equal(worker.infer({"x": x})["x"], x)
    finally:
        worker.close()


def test_a_bad_request_in_a_batch_fails_alone_with_its_own_error() -> None:
    worker = start_worker(EchoBackend, cfg=config(max_batch_size=8))
    try:
        good = {"x": np.ones((2, 3), np.float32)}
        results = worker.execute([good, {"BAD": np.ones((1, 3), np.float32)}, good])
        assert isinstance(results[1], InvalidArgument) and "BAD is refused" in results[1].message
        for r in (results[0], results[2]):
            assert isinstance(r, dict)
            np.testing.assert_array_equal(r["x"], good["x"])
        cannot_cross = worker.execute([{"z": np.ones(2, np.complex64)}])[0]
        assert isinstance(cannot_cross, InvalidArgument) and "tensor 'z'" in cannot_cross.message
        np.testing.assert_array_equal(worker.infer(good)["x"], good["x"])  # and it keeps serving
    finally:
        worker.close()


def test_a_worker_calls_other_models_through_the_server_while_its_request_runs() -> None:
    calls: list[tuple[str, str]] = []

    def server_infer(name: str, version: str, inputs: Inputs) -> Outputs:
        calls.append((name, version))
        if name != "inner":
            raise NotFound(f"unknown model '{name}'")
        return {"y": inputs["x"] * 10, "pid": np.array([os.getpid()], np.int64)}

    worker = start_worker(CallingBackend, infer=server_infer)
    try:
        x = np.arange(4, dtype=np.float32)
        out = worker.infer({"x": x})
        np.testing.assert_array_equal(out["y"], x * 10 + 1)
        assert int(out["pid"][0]) == worker.pid and int(out["inner_pid"][0]) == os.getpid()
        assert calls == [("inner", "")]
    finally:
        worker.close()


def test_waiting_for_a_busy_worker_is_queue_time() -> None:
    worker = start_worker(SleepBackend)
    stats = ModelStats("m", 1)
    scheduler = DirectScheduler([worker], stats)

    async def two_at_once() -> None:
        slow = {"x": np.array([0.3], np.float32)}
        await asyncio.gather(scheduler.run_async(slow), scheduler.run_async({"x": np.zeros(1, np.float32)}))

    try:
        asyncio.run(two_at_once())
        assert stats.queue.count == 2 and stats.queue.ns >= 0.25e9  # the second waited for the first
        assert scheduler.histograms.queue.count == 2
        assert stats.compute_infer.ns >= 0.25e9 and stats.execution_count == 2
    finally:
        scheduler.close()
        worker.close()


def test_a_killed_worker_fails_its_request_unavailable_and_is_restarted() -> None:
    worker = start_worker(SleepBackend, restart_backoff_s=2.0)
    try:
        first_pid = worker.pid
        assert first_pid is not None
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(worker.execute, [HUNG])
            wait_for(lambda: worker.describe()["busy"])
            os.kill(first_pid, signal.SIGKILL)
            error = pending.result(timeout=30)[0]
        assert isinstance(error, Unavailable)
        assert "model 'm' version 1" in error.message and "SIGKILL" in error.message
        assert not worker.available and "SIGKILL" in worker.down_reason  # not ready until it is back
        refused = worker.execute([{"x": np.zeros(1, np.float32)}])[0]
        assert isinstance(refused, Unavailable) and "not ready" in refused.message
        assert worker.wait_available(60)
        assert worker.restarts == 1 and worker.pid != first_pid and "SIGKILL" in worker.last_exit
        out = worker.infer({"x": np.zeros(1, np.float32)})
        assert int(out["pid"][0]) == worker.pid
    finally:
        worker.close()


def test_a_stuck_worker_is_answered_at_the_deadline_then_killed_and_replaced() -> None:
    worker = start_worker(SleepBackend, timeout_s=0.5, kill_timeout_s=0.5, restart_backoff_s=0.1)
    try:
        stuck_pid = worker.pid
        with ThreadPoolExecutor(1) as pool:
            start = time.monotonic()
            hung = pool.submit(worker.execute, [HUNG])
            wait_for(lambda: worker.describe()["busy"])
            behind = worker.execute([{"x": np.zeros(1, np.float32)}])[0]  # queued behind the stuck one
            error = hung.result(timeout=30)[0]
            elapsed = time.monotonic() - start
        assert isinstance(error, Unavailable) and "did not answer within 0.5 s" in error.message
        assert 0.45 <= elapsed < 5.0
        assert isinstance(behind, Unavailable) and "waited 0.5 s for a busy worker" in behind.message
        wait_for(lambda: worker.restarts == 1 and worker.available)
        assert worker.pid != stuck_pid and "stuck" in worker.last_exit and "killed" in worker.last_exit
        np.testing.assert_array_equal(worker.infer({"x": np.zeros(1, np.float32)})["y"], [0.0])
    finally:
        worker.close()


def test_close_kills_a_busy_worker_at_once() -> None:
    worker = start_worker(SleepBackend)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(worker.execute, [HUNG])
        wait_for(lambda: worker.describe()["busy"])
        start = time.monotonic()
        worker.close(grace_s=30.0)  # the grace is for an idle worker's finalize(): a busy one is killed
        assert time.monotonic() - start < 5.0
        error = pending.result(timeout=10)[0]
    assert isinstance(error, Unavailable) and "unloaded" in error.message
    assert worker._proc is not None and worker._proc.poll() is not None


def test_threads_and_the_event_loop_take_turns_reading_one_worker() -> None:
    """Sync waiters (threads) and async ones (the loop) interleave on one worker; each gets its answer."""
    worker = start_worker(EchoBackend)

    async def main() -> list[Outputs]:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(3) as pool:
            sync = [loop.run_in_executor(pool, worker.infer, {"x": np.full(3, i)}) for i in range(40)]
            asynchronous = [worker.execute_async([{"x": np.full(3, 100 + i)}]) for i in range(40)]
            done = await asyncio.gather(*sync, *asynchronous)
        return [d if isinstance(d, dict) else d.results[0] for d in done]  # type: ignore[misc]

    try:
        outs = asyncio.run(main())
        expected = [float(i) for i in range(40)] + [100.0 + i for i in range(40)]
        assert [float(o["x"][0]) for o in outs] == expected
    finally:
        worker.close()
