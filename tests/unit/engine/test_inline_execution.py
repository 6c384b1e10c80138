"""DirectScheduler runs fast models on the event loop and slow or contended ones on its worker thread;
only backends that declare ``never_blocks`` ever run on the loop."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from servelab.backends.base import Backend, BackendContext, Inputs, Outputs
from servelab.core.scheduling import DirectScheduler
from servelab.core.stats import ModelStats
from servelab.protocol import model_config_pb2 as mc


class _Recorder(Backend):
    kind = "recorder"
    never_blocks = True

    def load(self) -> None:
        self.threads: list[str] = []
        self.delay_s = 0.0
        self.wait_s = 0.0

    def infer(self, inputs: Inputs) -> Outputs:
        self.threads.append(threading.current_thread().name)
        if self.delay_s:  # compute time (the CPU kept busy): what the scheduler measures and decides on
            end = time.perf_counter() + self.delay_s
            while time.perf_counter() < end:
                pass
        if self.wait_s:  # waiting without the CPU (a GPU or OpenVINO call)
            time.sleep(self.wait_s)
        return {"y": inputs["x"]}


class _MayBlock(_Recorder):
    """Same runtime, but it does not promise never to block (like a python model)."""

    never_blocks = False


def _scheduler(tmp_path: Path, cls: type[_Recorder] = _Recorder, **params: str) -> tuple[DirectScheduler, _Recorder]:
    config = mc.ModelConfig(name="m", max_batch_size=0)
    for key, value in params.items():
        config.parameters[key].string_value = value
    backend = cls(BackendContext("m", 1, tmp_path, config))
    backend.load()
    return DirectScheduler([backend], ModelStats("m", 1)), backend


def _drive(scheduler: DirectScheduler, one_by_one: int, then_together: int = 0, backend: _Recorder | None = None) -> str:
    """``one_by_one`` requests in sequence, then (threads recorded afresh on ``backend``) ``then_together``
    at once; returns the name of the event loop's thread."""
    x = {"x": np.zeros(1, np.float32)}

    async def drive() -> str:
        for _ in range(one_by_one):
            await scheduler.run_async(x)
        if backend is not None:
            backend.threads.clear()
        await asyncio.gather(*(scheduler.run_async(x) for _ in range(then_together)))
        return threading.current_thread().name

    try:
        return asyncio.run(drive())
    finally:
        scheduler.close()


def test_fast_model_moves_onto_the_loop_once_measured(tmp_path: Path) -> None:
    scheduler, backend = _scheduler(tmp_path)
    loop_thread = _drive(scheduler, 80)
    assert backend.threads[0] != loop_thread  # unmeasured: the worker thread first
    assert backend.threads[-1] == loop_thread  # measured fast: inline


def test_a_backend_that_may_block_never_runs_on_the_loop(tmp_path: Path) -> None:
    scheduler, backend = _scheduler(tmp_path, _MayBlock)
    x = {"x": np.zeros(1, np.float32)}

    async def drive() -> str:
        for _ in range(80):  # fast and idle: a never_blocks backend would be inline by now
            await scheduler.run_async(x)
            await asyncio.sleep(0.001)
        return threading.current_thread().name

    loop_thread = asyncio.run(drive())
    assert backend.threads and loop_thread not in backend.threads
    assert scheduler.inline_ns == scheduler.idle_inline_ns == 0
    scheduler.close()


def test_slow_model_stays_on_the_worker(tmp_path: Path) -> None:
    scheduler, backend = _scheduler(tmp_path)
    backend.delay_s = 0.005  # above both inline thresholds
    assert _drive(scheduler, 30) not in backend.threads


def test_inline_can_be_turned_off(tmp_path: Path) -> None:
    scheduler, backend = _scheduler(tmp_path, inline_execution_us="0", idle_inline_execution_us="0")
    assert _drive(scheduler, 80) not in backend.threads


def test_concurrent_requests_use_the_worker_when_the_model_is_not_tiny(tmp_path: Path) -> None:
    scheduler, backend = _scheduler(tmp_path, inline_execution_us="0")  # only the idle rule may inline
    backend.delay_s = 0.0005
    # 60 in sequence let the measured time settle below the idle threshold; then back-to-back arrivals
    loop_thread = _drive(scheduler, 60, then_together=16, backend=backend)
    assert any(t != loop_thread for t in backend.threads)  # not idle: the worker


class _SlowOffTheLoop(_Recorder):
    """Fast on the event loop's thread, 1 ms of waiting (no CPU) on any other: a fast model whose worker-thread
    wall time is mostly taking the GIL back from a busy loop."""

    def infer(self, inputs: Inputs) -> Outputs:
        try:
            asyncio.get_running_loop()  # on the loop's thread
        except RuntimeError:
            time.sleep(0.001)
        return super().infer(inputs)


def test_a_fast_model_measured_slow_on_the_worker_is_probed_on_the_loop_and_moves_there(tmp_path: Path) -> None:
    # the idle rule is off (a loaded server is never idle): only the probe can find that the model is fast
    scheduler, backend = _scheduler(tmp_path, _SlowOffTheLoop, idle_inline_execution_us="0")
    loop_thread = _drive(scheduler, 150)
    assert backend.threads[0] != loop_thread  # unmeasured: the worker thread first
    assert backend.threads[-1] == loop_thread and scheduler.runs_inline_now
    first = backend.threads.index(loop_thread)
    assert set(backend.threads[first:]) == {loop_thread}  # once probed fast, it stays on the loop


def test_a_model_that_waits_without_the_cpu_is_probed_ever_more_rarely(tmp_path: Path) -> None:
    # a GPU or OpenVINO call: its thread's CPU time is small, its wall time on the loop is not
    scheduler, backend = _scheduler(tmp_path, idle_inline_execution_us="0")
    backend.wait_s = 0.001
    loop_thread = _drive(scheduler, 400)
    on_loop = [i for i, t in enumerate(backend.threads) if t == loop_thread]
    assert 3 <= len(on_loop) <= 4, on_loop  # probes after 16, 32, 64, 128 ... worker calls, each one failing
    gaps = [b - a for a, b in itertools.pairwise(on_loop)]
    assert gaps == sorted(gaps) and gaps[-1] > gaps[0], gaps
    assert backend.threads[-1] != loop_thread and not scheduler.runs_inline_now


def test_no_probe_runs_beside_the_versions_own_worker(tmp_path: Path) -> None:
    """A probe beside a request of the same version on its worker thread measures the two fighting for the
    GIL, not the model: the soak's stable version failed every probe so and stayed on the pool. Under a burst
    (its worker always busy) no request runs on the loop; the next one alone is the probe, and it moves there."""
    scheduler, backend = _scheduler(tmp_path, _SlowOffTheLoop, idle_inline_execution_us="0")
    x = {"x": np.zeros(1, np.float32)}

    async def drive() -> tuple[str, list[str], list[str]]:
        for _ in range(5):  # one at a time, each on the worker (5 of the 16 calls before the first probe)
            await scheduler.run_async(x)
        backend.threads.clear()
        await asyncio.gather(*(scheduler.run_async(x) for _ in range(100)))  # the probe falls due in here
        burst = list(backend.threads)
        backend.threads.clear()
        await scheduler.run_async(x)
        return threading.current_thread().name, burst, list(backend.threads)

    try:
        loop_thread, burst, after = asyncio.run(drive())
    finally:
        scheduler.close()
    assert loop_thread not in burst and len(burst) == 100
    assert after == [loop_thread] and scheduler.runs_inline_now


class _WaitsNowAndThen(_Recorder):
    """Fast; every 10th call waits 2 ms without the CPU (``busy``: computes 2 ms instead)."""

    busy = False

    def infer(self, inputs: Inputs) -> Outputs:
        if len(self.threads) % 10 == 9:
            self.wait_s, self.delay_s = (0.0, 0.002) if self.busy else (0.002, 0.0)
        else:
            self.wait_s = self.delay_s = 0.0
        return super().infer(inputs)


@pytest.mark.parametrize("busy", [False, True])
def test_an_inline_model_that_waits_now_and_then_stays_on_the_loop_one_that_computes_leaves(
    tmp_path: Path, busy: bool
) -> None:
    """A wait on the loop (the GIL taken back from another thread, a device) counts at most 4x the inline
    threshold; 2 ms of computing counts in full and sends the model to the worker at once."""
    scheduler, backend = _scheduler(tmp_path, _WaitsNowAndThen, idle_inline_execution_us="0")  # probes decide
    backend.busy = busy
    loop_thread = _drive(scheduler, 100)
    first = backend.threads.index(loop_thread)
    if busy:
        assert any(t != loop_thread for t in backend.threads[first:])  # left the loop after a busy call
    else:
        assert set(backend.threads[first:]) == {loop_thread} and scheduler.runs_inline_now
