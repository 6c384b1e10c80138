"""Pipelining on a real worker process: while one request runs, the next is already sent, so the worker
starts it without waiting for the server to wake up. What waits in the worker is queue time, not compute;
a worker that dies, or answers late, takes no pipelined request down with it unanswered."""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from workers_testutil import HUNG, SleepBackend, start_worker, wait_for

from servelab.errors import Unavailable


def _sleep(seconds: float) -> dict[str, np.ndarray]:
    return {"x": np.array([seconds], np.float32)}


def test_the_request_behind_a_running_one_is_sent_at_once_and_its_wait_is_queue_time() -> None:
    worker = start_worker(SleepBackend)
    try:
        with ThreadPoolExecutor(3) as pool:
            slow = pool.submit(worker.execute_timed, [_sleep(0.4)])
            wait_for(lambda: worker.describe()["busy"])
            behind = pool.submit(worker.execute_timed, [_sleep(0.0)])
            wait_for(lambda: worker.describe()["queued"] == 1)
            assert worker._d.pipelined is not None  # sent to the worker, not held in the server's queue
            last = pool.submit(worker.execute_timed, [_sleep(0.0)])
            wait_for(lambda: worker.describe()["queued"] == 2)
            assert len(worker._d.queue) == 1  # one pipelined at most
            first, second, third = slow.result(30), behind.result(30), last.result(30)
        assert all(not isinstance(e.results[0], Exception) for e in (first, second, third))
        assert first.infer_ns >= 0.35e9
        assert second.queue_ns >= 0.3e9 and second.infer_ns < 0.2e9  # waited in the worker: queue, not compute
        assert third.queue_ns >= 0.3e9 and third.infer_ns < 0.2e9
        assert worker.describe()["queued"] == 0 and not worker.describe()["busy"]
    finally:
        worker.close()


def test_a_killed_worker_fails_the_pipelined_and_queued_requests_as_not_run_and_serves_again() -> None:
    worker = start_worker(SleepBackend, restart_backoff_s=0.1)
    try:
        pid = worker.pid
        assert pid is not None
        with ThreadPoolExecutor(3) as pool:
            hung = pool.submit(worker.execute, [HUNG])
            wait_for(lambda: worker.describe()["busy"])
            pipelined = pool.submit(worker.execute, [_sleep(0.0)])
            wait_for(lambda: worker.describe()["queued"] == 1)
            queued = pool.submit(worker.execute, [_sleep(0.0)])
            wait_for(lambda: worker.describe()["queued"] == 2)
            os.kill(pid, signal.SIGKILL)
            running_error = hung.result(30)[0]
            errors = [pipelined.result(30)[0], queued.result(30)[0]]
        assert isinstance(running_error, Unavailable) and "while running the request" in running_error.message
        for error in errors:
            assert isinstance(error, Unavailable) and "before the request ran" in error.message
        assert worker.wait_available(60)
        out = worker.infer(_sleep(0.0))
        assert int(out["pid"][0]) == worker.pid != pid
    finally:
        worker.close()


def test_late_answers_of_a_timed_out_request_and_of_the_one_behind_it_are_drained() -> None:
    """The running request is answered at its deadline, the pipelined one when it has waited as long; their
    late results still come from the worker (it is not stuck long enough to be killed) and are read and
    dropped, and the next request gets its own answer."""
    worker = start_worker(SleepBackend, timeout_s=0.3, kill_timeout_s=30.0)
    try:
        pid = worker.pid
        with ThreadPoolExecutor(2) as pool:
            late = pool.submit(worker.execute, [_sleep(0.6)])
            wait_for(lambda: worker.describe()["busy"])
            behind = pool.submit(worker.execute, [_sleep(0.0)])
            errors = [late.result(30)[0], behind.result(30)[0]]
        assert isinstance(errors[0], Unavailable) and "did not answer within 0.3 s" in errors[0].message
        assert isinstance(errors[1], Unavailable) and "for a busy worker" in errors[1].message
        out = worker.infer({"x": np.array([0.01], np.float32)})
        assert float(out["y"][0]) == np.float32(0.01) and int(out["pid"][0]) == pid  # the same worker, not killed
        wait_for(lambda: not worker.describe()["busy"] and worker.describe()["queued"] == 0)
    finally:
        worker.close()
