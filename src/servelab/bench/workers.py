"""Run one load level in this event loop or in several processes, as one stream of events.

Events are tuples: ``("measuring", worker)`` once warm-up is over, ``("window", worker, index,
WindowStats, final)``, ``("done", worker, sent)`` and
``("failed", worker, message)``. Worker processes are fresh interpreters (``python -c``), each with its
own event loop (uvloop when installed): the job goes in as a pickle on stdin, windows come back as
length-framed pickles on stdout. Unlike multiprocessing's ``spawn``, this never re-imports the
caller's ``__main__``, so it works from scripts, ``python -m`` and pytest alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import struct
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any, BinaryIO

from servelab.bench.clients import make_client
from servelab.bench.inputs import Request
from servelab.bench.loadgen import WorkerPlan, open_loop_senders, run_worker
from servelab.bench.specs import TargetSpec
from servelab.bench.stats import WindowStats

__all__ = ["Event", "LevelJob", "child_main", "client_connections", "run_level_events", "split_plan"]

# A worker process is the load generator's own program: it sets its gRPC client's switches itself.
_CHILD = (
    "from servelab.config.grpc_runtime import CLIENT_EXPERIMENTS, disable_grpc_experiments; "
    "disable_grpc_experiments(CLIENT_EXPERIMENTS); "
    "from servelab.bench.workers import child_main; child_main()"
)

Event = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class LevelJob:
    """Everything a worker needs (picklable)."""

    target: TargetSpec
    model: str
    requests: list[Request]
    plan: WorkerPlan


def _share(total: int, n: int, i: int) -> int:
    return total // n + (1 if i < total % n else 0)


def split_plan(plan: WorkerPlan, workers: int) -> list[WorkerPlan]:
    """Divide a level between ``workers`` (fewer when concurrency is smaller than the worker count)."""
    n = max(1, min(workers, int(plan.level))) if plan.mode == "concurrency" else max(1, workers)
    plans = []
    for i in range(n):
        level = _share(int(plan.level), n, i) if plan.mode == "concurrency" else plan.level / n
        plans.append(
            replace(
                plan,
                level=level,
                request_count=None if plan.request_count is None else _share(plan.request_count, n, i),
                window_requests=None
                if plan.window_requests is None
                else max(1, -(-plan.window_requests // n)),
                warmup_requests=_share(plan.warmup_requests, n, i),
                max_inflight=max(1, plan.max_inflight // n),
                seed=plan.seed + 7919 * i,
            )
        )
    return [p for p in plans if p.request_count != 0]


def client_connections(plan: WorkerPlan) -> int:
    """How many requests one worker's client carries at once: the concurrency in a closed loop, the senders
    (:func:`servelab.bench.loadgen.open_loop_senders`) in an open loop."""
    return max(1, int(plan.level)) if plan.mode == "concurrency" else open_loop_senders(plan)


async def _run_job(job: LevelJob, emit: Any, stop: asyncio.Event, on_measuring: Callable[[], None]) -> int:
    client = make_client(job.target, job.model, client_connections(job.plan))
    client.prepare(job.requests)
    await client.start()
    try:
        return await run_worker(client, job.plan, emit, stop, on_measuring)
    finally:
        await client.close()


async def _local_events(job: LevelJob, stop: asyncio.Event) -> AsyncIterator[Event]:
    events: asyncio.Queue[Event] = asyncio.Queue()

    async def main() -> None:
        try:
            emit = lambda i, w, f: events.put_nowait(("window", 0, i, w, f))  # noqa: E731
            sent = await _run_job(job, emit, stop, lambda: events.put_nowait(("measuring", 0)))
            events.put_nowait(("done", 0, sent))
        except Exception as exc:
            events.put_nowait(("failed", 0, f"{type(exc).__name__}: {exc}"))

    task = asyncio.create_task(main())
    try:
        while True:
            event = await events.get()
            yield event
            if event[0] in ("done", "failed"):
                return
    finally:
        stop.set()
        await task


def _write_event(out: BinaryIO, event: Event) -> None:
    data = pickle.dumps(event)
    out.write(struct.pack("<I", len(data)) + data)
    out.flush()


def _read_exactly(fd: int, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError(f"stdin closed after {len(buf)} of {n} bytes of the job")
        buf += chunk
    return bytes(buf)


def child_main() -> None:
    """Entry point of a worker process: a length-framed pickled LevelJob on stdin, framed pickled events on stdout.

    Any byte (or end of file) on stdin afterwards means stop.
    """
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write into the event stream
    fd = sys.stdin.fileno()
    job: LevelJob = pickle.loads(_read_exactly(fd, struct.unpack("<I", _read_exactly(fd, 4))[0]))
    worker = int(os.environ.get("SERVELAB_BENCH_WORKER", "0"))
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_stdin() -> None:
            os.read(fd, 1)  # a stop byte, or b"" when the parent went away: stop either way
            loop.remove_reader(fd)
            stop.set()

        loop.add_reader(fd, on_stdin)
        emit = lambda i, w, f: _write_event(out, ("window", worker, i, w.to_dict(), f))  # noqa: E731
        measuring = lambda: _write_event(out, ("measuring", worker))  # noqa: E731
        _write_event(out, ("done", worker, await _run_job(job, emit, stop, measuring)))

    try:
        asyncio.run(main())
    except Exception as exc:
        _write_event(out, ("failed", worker, f"{type(exc).__name__}: {exc}"))


async def _read_events(proc: asyncio.subprocess.Process, worker: int, events: asyncio.Queue[Event]) -> None:
    assert proc.stdout is not None
    ended = False
    try:
        while True:
            size = struct.unpack("<I", await proc.stdout.readexactly(4))[0]
            event = pickle.loads(await proc.stdout.readexactly(size))
            if event[0] == "window":
                event = (*event[:3], WindowStats.from_dict(event[3]), event[4])
            ended = ended or event[0] in ("done", "failed")
            events.put_nowait(event)
    except asyncio.IncompleteReadError:
        if not ended:
            code = await proc.wait()
            events.put_nowait(("failed", worker, f"worker process exited with code {code} before finishing"))


async def _forward_stop(procs: list[asyncio.subprocess.Process], stop: asyncio.Event) -> None:
    await stop.wait()
    for p in procs:
        if p.stdin is not None and not p.stdin.is_closing():
            with contextlib.suppress(ConnectionError):
                p.stdin.write(b"s")
                await p.stdin.drain()


async def _process_events(jobs: list[LevelJob], stop: asyncio.Event) -> AsyncIterator[Event]:
    events: asyncio.Queue[Event] = asyncio.Queue()
    procs: list[asyncio.subprocess.Process] = []
    for i, job in enumerate(jobs):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _CHILD, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "SERVELAB_BENCH_WORKER": str(i)},
        )  # fmt: skip
        assert proc.stdin is not None
        data = pickle.dumps(job)
        proc.stdin.write(struct.pack("<I", len(data)) + data)
        await proc.stdin.drain()
        procs.append(proc)
    tasks = [asyncio.create_task(_read_events(p, i, events)) for i, p in enumerate(procs)]
    forward = asyncio.create_task(_forward_stop(procs, stop))
    finished = 0
    try:
        while finished < len(procs):
            event = await events.get()
            finished += event[0] in ("done", "failed")
            yield event
    finally:
        stop.set()
        await forward
        for p in procs:
            try:
                await asyncio.wait_for(p.wait(), timeout=10.0)
            except TimeoutError:
                p.kill()
                await p.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def run_level_events(jobs: list[LevelJob], stop: asyncio.Event) -> AsyncIterator[Event]:
    """Stream the events of one level: in this loop for one job, else one process per job."""
    if len(jobs) == 1:
        return _local_events(jobs[0], stop)
    return _process_events(jobs, stop)
