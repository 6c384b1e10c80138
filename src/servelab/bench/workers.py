"""Run one load level in this event loop or in several processes, as one stream of events.

Events are tuples: ``("window", worker, index, WindowStats, final)``, ``("done", worker, sent)`` and
``("failed", worker, message)``. Worker processes use the ``spawn`` start method, each with its own
event loop (uvloop when installed), and send windows back as plain dicts over a multiprocessing queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import queue as queue_mod
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

from servelab.bench.clients import make_client
from servelab.bench.inputs import Request
from servelab.bench.loadgen import WorkerPlan, run_worker
from servelab.bench.specs import TargetSpec
from servelab.bench.stats import WindowStats

__all__ = ["Event", "LevelJob", "run_level_events", "split_plan"]

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
                window_requests=None if plan.window_requests is None else max(1, -(-plan.window_requests // n)),
                warmup_requests=_share(plan.warmup_requests, n, i),
                max_inflight=max(1, plan.max_inflight // n),
                seed=plan.seed + 7919 * i,
            )
        )
    return [p for p in plans if p.request_count != 0]


async def _run_job(job: LevelJob, emit: Any, stop: asyncio.Event) -> int:
    inflight = int(job.plan.level) if job.plan.mode == "concurrency" else job.plan.max_inflight
    client = make_client(job.target, job.model, max(1, inflight))
    client.prepare(job.requests)
    await client.start()
    try:
        return await run_worker(client, job.plan, emit, stop)
    finally:
        await client.close()


async def _local_events(job: LevelJob, stop: asyncio.Event) -> AsyncIterator[Event]:
    events: asyncio.Queue[Event] = asyncio.Queue()

    async def main() -> None:
        try:
            sent = await _run_job(job, lambda i, w, f: events.put_nowait(("window", 0, i, w, f)), stop)
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


def _process_main(job: LevelJob, worker: int, out: Any, stop_flag: Any) -> None:
    """Entry point of a worker process."""
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()

    async def main() -> None:
        stop = asyncio.Event()

        async def watch() -> None:
            while not stop.is_set():
                if stop_flag.is_set():
                    stop.set()
                await asyncio.sleep(0.02)

        watcher = asyncio.create_task(watch())
        try:
            emit = lambda i, w, f: out.put(("window", worker, i, w.to_dict(), f))  # noqa: E731
            sent = await _run_job(job, emit, stop)
            out.put(("done", worker, sent))
        finally:
            stop.set()
            await watcher

    try:
        asyncio.run(main())
    except Exception as exc:
        out.put(("failed", worker, f"{type(exc).__name__}: {exc}"))


async def _process_events(jobs: list[LevelJob], stop: asyncio.Event) -> AsyncIterator[Event]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    stop_flag = ctx.Event()
    procs = [ctx.Process(target=_process_main, args=(j, i, out, stop_flag), daemon=True) for i, j in enumerate(jobs)]
    for p in procs:
        p.start()
    loop = asyncio.get_running_loop()
    finished: set[int] = set()
    try:
        while len(finished) < len(procs):
            if stop.is_set():
                stop_flag.set()
            try:
                event = await loop.run_in_executor(None, out.get, True, 0.05)
            except queue_mod.Empty:
                dead = [i for i, p in enumerate(procs) if i not in finished and not p.is_alive() and out.empty()]
                for i in dead:
                    finished.add(i)
                    yield ("failed", i, f"worker process exited with code {procs[i].exitcode}")
                continue
            if event[0] == "window":
                event = (*event[:3], WindowStats.from_dict(event[3]), event[4])
            elif event[0] in ("done", "failed"):
                finished.add(event[1])
            yield event
    finally:
        stop_flag.set()
        for p in procs:
            await loop.run_in_executor(None, p.join, 10.0)
            if p.is_alive():
                p.terminate()
                p.join(2.0)


def run_level_events(jobs: list[LevelJob], stop: asyncio.Event) -> AsyncIterator[Event]:
    """Stream the events of one level: in this loop for one job, else one process per job."""
    if len(jobs) == 1:
        return _local_events(jobs[0], stop)
    return _process_events(jobs, stop)
