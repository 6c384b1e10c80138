"""How busy an event loop's thread is, which keeps the spin for a worker's answer off while the loop has
work queued that servelab cannot count (gRPC calls grpc.aio holds): a thread that mostly sleeps reads idle,
one that is always working reads busy and idle again once it rests; its own spinning is not counted as work."""

from __future__ import annotations

import time

from servelab.core.workers._loop_reading import WINDOW_NS, LoopLoad


def _work(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _windows(load: LoopLoad, count: int, work_s: float, rest_s: float, spin: bool = False) -> list[bool]:
    """``count`` windows in which the thread works ``work_s`` and sleeps ``rest_s`` per step; busy after each."""
    busy = []
    for _ in range(count):
        end = time.perf_counter_ns() + WINDOW_NS * 1.2
        while time.perf_counter_ns() < end:
            start = time.perf_counter_ns()
            _work(work_s)
            if spin:
                load.spun_ns += time.perf_counter_ns() - start
            time.sleep(rest_s)
            load.sample()
        busy.append(load.busy)
    return busy


def test_a_thread_that_mostly_sleeps_reads_idle() -> None:
    load = LoopLoad()
    _windows(load, 3, 0.0002, 0.002)
    assert load.idle()


def test_a_thread_always_working_reads_busy_and_idle_again_once_it_rests() -> None:
    load = LoopLoad()
    busy = _windows(load, 5, 0.002, 0.0)
    assert sum(busy[1:]) >= 3, busy  # a virtual machine may take the CPU away for a window now and then
    _windows(load, 2, 0.0002, 0.002)
    assert load.idle()


def test_time_spent_spinning_is_not_work() -> None:
    load = LoopLoad()
    _windows(load, 3, 0.002, 0.0, spin=True)  # busy only spinning: the loop had nothing else to do
    assert load.idle()


def test_the_share_is_worked_out_once_a_window() -> None:
    load = LoopLoad()
    load.sample()
    began = load.window_wall
    load.sample()
    assert load.window_wall == began and began > 0
