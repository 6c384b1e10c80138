"""Measure one level (windows until stable or ``max_windows``), and sweep the levels of a LoadSpec.

``run_sweep(target, model, load, inputs)`` is the one entry point other commands (compare, advisor)
call: it fetches metadata, builds requests, measures each level, optionally the generator's ceiling
against a null endpoint, and returns a ``SweepResult``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from servelab.bench.inputs import Request, TensorMeta, build_requests
from servelab.bench.loadgen import OPEN_LOOP_SENDERS, WorkerPlan
from servelab.bench.metadata import fetch_input_metas
from servelab.bench.nullserver import NullServer
from servelab.bench.results import LevelResult, SweepResult, is_stable, summarise_windows
from servelab.bench.serverstats import StatsReader, rss_bytes, split_per_request_us
from servelab.bench.specs import InputSpec, LoadSpec, TargetSpec
from servelab.bench.stats import WindowStats
from servelab.bench.workers import LevelJob, run_level_events, split_plan
from servelab.errors import Unavailable

__all__ = ["LevelProgress", "measure_level", "run_sweep", "run_sweep_async", "worker_plan"]

LevelProgress = Callable[[float, int, WindowStats], None]
"""progress(level, window_index, merged_window) after each complete window."""


def worker_plan(load: LoadSpec, level: float, batch_size: int) -> WorkerPlan:
    return WorkerPlan(
        mode=load.mode,
        level=level,
        arrivals=load.arrivals,
        interval_s=load.measurement_interval_ms / 1e3,
        window_requests=load.window_requests,
        request_count=load.request_count,
        warmup_requests=load.warmup_requests,
        max_s=load.max_level_s,
        max_inflight=load.max_inflight,
        batch_size=batch_size,
        seed=load.seed,
    )


@dataclass
class _Collector:
    """Merges per-worker windows by index and keeps the per-worker totals."""

    n_workers: int
    partial: dict[int, tuple[WindowStats, set[int]]] = field(default_factory=dict)
    complete: list[WindowStats] = field(default_factory=list)
    per_worker: dict[int, WindowStats] = field(default_factory=dict)

    def add(self, worker: int, index: int, stats: WindowStats) -> bool:
        """Add a window; True when window ``len(complete)`` just became complete."""
        total = self.per_worker.setdefault(worker, WindowStats(0.0, batch_size=stats.batch_size))
        total.merge_sequential(stats)
        if index < len(self.complete):
            return False
        if index not in self.partial:
            self.partial[index] = (WindowStats(stats.duration_s, batch_size=stats.batch_size), set())
            self.partial[index][0].histogram.merge(stats.histogram)
            self.partial[index][0].errors.update(stats.errors)
        else:
            self.partial[index][0].merge_concurrent(stats)
        self.partial[index][1].add(worker)
        nxt = len(self.complete)
        if nxt in self.partial and len(self.partial[nxt][1]) == self.n_workers:
            self.complete.append(self.partial.pop(nxt)[0])
            return True
        return False

    def all_requests(self) -> WindowStats:
        """Everything measured, over all workers (rates add)."""
        workers = list(self.per_worker.values())
        if not workers:
            return WindowStats(0.0)
        total = WindowStats(workers[0].duration_s, batch_size=workers[0].batch_size)
        total.histogram.merge(workers[0].histogram)
        total.errors.update(workers[0].errors)
        for w in workers[1:]:
            total.merge_concurrent(w)
        return total


async def measure_level(
    target: TargetSpec,
    model: str,
    requests: list[Request],
    load: LoadSpec,
    level: float,
    batch_size: int = 1,
    stats_reader: StatsReader | None = None,
    progress: LevelProgress | None = None,
) -> LevelResult:
    """Measure one level until the last three windows agree or ``max_windows`` (or the request count) is reached."""
    plans = split_plan(worker_plan(load, level, batch_size), load.workers)
    jobs = [LevelJob(target, model, requests, p) for p in plans]
    stop = asyncio.Event()
    col = _Collector(len(jobs))
    snaps = [await stats_reader.snapshot()] if stats_reader else []
    rss: list[int] = []
    failures: list[str] = []
    sent = measuring = 0
    decided = False
    async for event in run_level_events(jobs, stop):
        if event[0] == "window":
            _, worker, index, stats, _final = event
            if decided or not col.add(worker, index, stats):  # windows closed while draining do not count
                continue
            if stats_reader:
                snaps.append(await stats_reader.snapshot())
            if target.server_pid and (r := rss_bytes(target.server_pid)) is not None:
                rss.append(r)
            if progress:
                progress(level, len(col.complete) - 1, col.complete[-1])
            if load.request_count is None and (
                is_stable(col.complete, load.stability_percentage) or len(col.complete) >= load.max_windows
            ):
                decided = True
                stop.set()
        elif event[0] == "measuring":
            measuring += 1
            if stats_reader and measuring == len(jobs):
                snaps = [await stats_reader.snapshot()]  # warm-up stays out of the server-side split
        elif event[0] == "done":
            sent += event[2]
        else:
            failures.append(f"worker {event[1]}: {event[2]}")
            stop.set()
    return _level_result(load, level, len(jobs), batch_size, col, snaps, rss, failures, sent)


def _level_result(
    load: LoadSpec,
    level: float,
    workers: int,
    batch_size: int,
    col: _Collector,
    snaps: list[dict[str, tuple[int, int]] | None],
    rss: list[int],
    failures: list[str],
    sent: int,
) -> LevelResult:
    windows = col.complete
    if load.request_count is not None:
        summary = col.all_requests()
        used = len(windows)
    else:
        used = min(3, len(windows))
        summary = summarise_windows(windows[-used:]) if windows else WindowStats(0.0, batch_size=batch_size)
    errors: Counter[str] = Counter()
    for w in col.per_worker.values():
        errors.update(w.errors)
    server = None
    if len(snaps) > used and snaps[-1] is not None and snaps[-1 - used] is not None:
        server = split_per_request_us(snaps[-1 - used], snaps[-1])  # type: ignore[arg-type]
    return LevelResult(
        mode=load.mode,
        level=level,
        workers=workers,
        batch_size=batch_size,
        windows=windows,
        summary=summary,
        stable=is_stable(windows, load.stability_percentage),
        sent=sent,
        errors=errors,
        server=server,
        server_rss_mb=max(rss) / 2**20 if rss else None,
        failures=failures,
    )


def _ceiling_load(load: LoadSpec, level: float) -> tuple[LoadSpec, float]:
    """Closed loop at the same concurrency (or, for open-loop levels, the open loop's senders), short windows."""
    conc = level if load.mode == "concurrency" else float(min(OPEN_LOOP_SENDERS, load.max_inflight))
    short = replace(
        load, mode="concurrency", levels=(conc,), measurement_interval_ms=min(load.measurement_interval_ms, 500),
        window_requests=None, request_count=None, max_windows=3, warmup_requests=max(load.warmup_requests, 20),
    )  # fmt: skip
    return short, conc


async def _ceiling(
    null_url: str,
    target: TargetSpec,
    model: str,
    requests: list[Request],
    load: LoadSpec,
    level: float,
    cache: dict[float, float],
) -> float:
    short, conc = _ceiling_load(load, level)
    if conc not in cache:
        null_target = replace(target, url=null_url, server_pid=None)
        result = await measure_level(null_target, model, requests, short, conc)
        cache[conc] = result.throughput_rps
    return cache[conc]


async def run_sweep_async(
    target: TargetSpec,
    model: str,
    load: LoadSpec,
    inputs: InputSpec,
    measure_ceiling: bool = True,
    progress: LevelProgress | None = None,
) -> SweepResult:
    """Measure every level of ``load`` against ``target``; see ``run_sweep``."""
    metas = await fetch_input_metas(target, model)
    if not metas and inputs.shapes:
        metas = [TensorMeta(n, "FP32", (-1, *d)) for n, d in inputs.shapes.items()]
    requests = build_requests(metas, inputs)
    reader = StatsReader(target, model)
    await reader.open()
    results: list[LevelResult] = []
    cache: dict[float, float] = {}
    null = (
        NullServer("grpc" if target.kind == "oip-grpc" else "http")
        if measure_ceiling and target.kind != "inprocess"
        else None
    )
    try:
        if null is not None:
            null.__enter__()
        for level in load.levels:
            result = await measure_level(
                target,
                model,
                requests,
                load,
                level,
                inputs.batch_size,
                reader if reader.available else None,
                progress,
            )
            if result.summary.completed == 0 and result.errors:
                result.failures.append(f"no request succeeded; errors: {dict(result.errors)}")
            if null is not None:
                result.ceiling_rps = await _ceiling(null.url, target, model, requests, load, level, cache)
            results.append(result)
    finally:
        if null is not None:
            null.__exit__(None, None, None)
        await reader.close()
    settings = {
        "load": asdict(load),
        "batch_size": inputs.batch_size,
        "input_data": inputs.data_path,
        "inputs": [{"name": m.name, "datatype": m.datatype, "shape": list(m.shape)} for m in metas],
        "statistics_extension": reader.available,
    }
    return SweepResult(target=target.url, kind=target.kind, model=model, levels=results, settings=settings)


def run_sweep(
    target: TargetSpec,
    model: str,
    load: LoadSpec,
    inputs: InputSpec,
    measure_ceiling: bool = True,
    progress: LevelProgress | None = None,
) -> SweepResult:
    """Measure ``model`` on ``target`` at every level of ``load`` (blocking; runs its own event loop)."""
    try:
        return asyncio.run(run_sweep_async(target, model, load, inputs, measure_ceiling, progress))
    except OSError as exc:
        raise Unavailable(f"cannot measure {target.url}: {exc}") from exc
