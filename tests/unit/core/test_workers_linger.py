"""A worker lingers after a request the server flagged so: it polls its socket for the next request for up to
its budget instead of sleeping, only while requests come closer together than that, and never keeps polling
for a request that does not come. Polling shows as CPU time of the waiting thread; sleeping does not."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from workers_testutil import EchoBackend, channel_pair, start_worker

from servelab.core.workers import LINGER_ALLOWED
from servelab.core.workers._channel import EXECUTE, Channel
from servelab.core.workers._pump import Pump, RunQueue

MIB = 1 << 20
MS = 1_000_000


@pytest.fixture
def pair() -> Iterator[tuple[Channel, Channel]]:
    with channel_pair(MIB) as ends:
        yield ends


def _execute(server: Channel, msg_id: int, linger: bool = True) -> None:
    server.send(EXECUTE, msg_id, build=lambda put: (linger, [put({"x": np.full(2, msg_id, np.float32)})]), owner=msg_id)


def _pump(worker: Channel, spin_us: int) -> Pump:
    """A pump on a machine it sees as never crowded (the run-queue gate has a test of its own)."""
    pump = Pump(worker, spin_us=spin_us)
    assert pump.run_queue is not None
    pump.run_queue.cpus = 1 << 30
    return pump


def _wait_cpu(pump: Pump, linger: bool, after_s: float, send: Any) -> tuple[tuple[int, int, Any], int, int]:
    """The next request, sent by another thread ``after_s`` from now; the waiting thread's CPU and wall time."""
    timer = threading.Timer(after_s, send)
    wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
    timer.start()
    message = pump.next_request(linger)
    cpu, wall = time.thread_time_ns() - cpu, time.perf_counter_ns() - wall
    timer.join()
    return message, cpu, wall


def test_after_a_lingering_request_the_worker_polls_and_the_request_arrives_whole(pair: tuple[Channel, Channel]) -> None:
    server, worker = pair
    pump = _pump(worker, 200_000)  # a budget far above the gap, so it polls the whole wait
    (kind, msg_id, (linger, requests)), cpu, wall = _wait_cpu(pump, True, 0.03, lambda: _execute(server, 7))
    assert (kind, msg_id, linger) == (EXECUTE, 7, True)
    np.testing.assert_array_equal(requests[0]["x"], np.full(2, 7, np.float32))
    assert cpu > 0.5 * wall and wall >= 30 * MS  # it polled
    assert 0.15 * wall <= pump.gap_ns <= 0.25 * wall  # the average of gaps moved a fifth of the way to this one


def test_without_the_flag_the_worker_sleeps(pair: tuple[Channel, Channel]) -> None:
    server, worker = pair
    pump = _pump(worker, 200_000)
    (_, msg_id, _), cpu, wall = _wait_cpu(pump, False, 0.03, lambda: _execute(server, 3))
    assert msg_id == 3 and wall >= 30 * MS
    assert cpu < 0.2 * wall and pump.gap_ns == 0


def test_polling_stops_at_the_budget_and_the_worker_then_sleeps(pair: tuple[Channel, Channel]) -> None:
    server, worker = pair
    pump = _pump(worker, 5_000)
    (_, msg_id, _), cpu, wall = _wait_cpu(pump, True, 0.1, lambda: _execute(server, 4))
    assert msg_id == 4 and wall >= 100 * MS
    assert cpu < 40 * MS  # ~5 ms of polling, then asleep for the rest of the 100 ms


def test_requests_further_apart_than_the_budget_are_awaited_asleep_until_they_come_closer(
    pair: tuple[Channel, Channel],
) -> None:
    server, worker = pair
    pump = _pump(worker, 100_000)
    pump.gap_ns = 500 * MS  # the last requests came half a second apart
    (_, msg_id, _), cpu, wall = _wait_cpu(pump, True, 0.03, lambda: _execute(server, 5))
    assert msg_id == 5 and cpu < 0.2 * wall
    assert pump.gap_ns < 500 * MS  # the closer request pulls the average down: polling resumes in a few requests
    while pump.gap_ns > pump.spin_ns:
        _wait_cpu(pump, True, 0.002, lambda: _execute(server, 6))
    _, cpu, wall = _wait_cpu(pump, True, 0.03, lambda: _execute(server, 8))[:3]
    assert cpu > 0.5 * wall


def test_a_request_already_there_is_taken_at_once(pair: tuple[Channel, Channel]) -> None:
    server, worker = pair
    pump = _pump(worker, 200_000)
    _execute(server, 9)
    start = time.perf_counter_ns()
    assert pump.next_request(True)[1] == 9
    assert time.perf_counter_ns() - start < 50 * MS


def test_while_most_requests_find_the_worker_busy_it_does_not_poll(pair: tuple[Channel, Channel]) -> None:
    """Requests that are already there when the worker looks come back to back (several clients): the one
    that is not there yet is awaited asleep, so the worker leaves the CPU to those producing them."""
    server, worker = pair
    pump = _pump(worker, 200_000)
    for msg_id in range(10):
        _execute(server, msg_id)
        pump.next_request(True)
    assert pump.queued_share > 0.8
    _, cpu, wall = _wait_cpu(pump, True, 0.03, lambda: _execute(server, 10))
    assert cpu < 0.2 * wall


def test_the_server_going_away_ends_the_polling(pair: tuple[Channel, Channel]) -> None:
    server, worker = pair
    pump = _pump(worker, 200_000)
    threading.Timer(0.02, server.close).start()
    start = time.perf_counter_ns()
    with pytest.raises(EOFError):
        pump.next_request(True)
    assert time.perf_counter_ns() - start < 150 * MS


def test_on_a_machine_with_threads_waiting_for_a_cpu_the_worker_sleeps(pair: tuple[Channel, Channel]) -> None:
    """One busy process per CPU and one more: the run queue is longer than the CPUs, polling would take a CPU
    from someone, so the worker stops polling at once."""
    server, worker = pair
    busy = [subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 20\nwhile time.time() < end: pass"])
            for _ in range((os.cpu_count() or 1) + 1)]  # fmt: skip
    try:
        run_queue = RunQueue()
        deadline = time.monotonic() + 10
        while not (run_queue.crowded() and run_queue.crowded()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert run_queue.crowded(), "the busy processes did not show in /proc/loadavg"
        pump = Pump(worker, spin_us=200_000)
        (_, msg_id, _), cpu, wall = _wait_cpu(pump, True, 0.1, lambda: _execute(server, 11))
        assert msg_id == 11 and cpu < 0.2 * wall, (cpu, wall)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()


def _worker_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_real_worker_lingers_for_requests_from_an_idle_event_loop_and_not_for_threads_nor_grpc() -> None:
    """30 requests 5 ms apart: sent from an idle event loop the worker polls between them (~150 ms of its CPU);
    from threads (execute_timed, no loop to judge) it sleeps, and so it does for requests whose front door
    said no (gRPC's, LINGER_ALLOWED)."""
    worker = start_worker(EchoBackend, worker_spin_us=10_000)
    try:
        pid = worker.pid
        assert pid is not None
        x = {"x": np.ones(4, np.float32)}

        async def from_the_loop(allowed: bool = True) -> None:
            LINGER_ALLOWED.set(allowed)
            for _ in range(30):
                await worker.execute_async([x])
                time.sleep(0.005)  # the loop rests: its thread is idle, not busy

        lingering = 0.0
        for _ in range(3):  # the worker stops polling while threads wait for a CPU (RunQueue): a busy moment passes
            before = _worker_cpu_s(pid)
            asyncio.run(from_the_loop())
            lingering = _worker_cpu_s(pid) - before
            if lingering >= 0.06:
                break
        before = _worker_cpu_s(pid)
        asyncio.run(from_the_loop(allowed=False))
        refused = _worker_cpu_s(pid) - before
        before = _worker_cpu_s(pid)
        for _ in range(30):
            worker.execute_timed([x])
            time.sleep(0.005)
        sleeping = _worker_cpu_s(pid) - before
        assert lingering >= 0.06 and sleeping <= 0.04 and refused <= 0.04, (lingering, sleeping, refused)
    finally:
        worker.close()
