"""The quick in-process run per runtime x precision that prunes runtimes before anything is served.

Each artefact is loaded through the servelab backend that would serve it and called directly: the median
latency of one-row calls and the rows/s of full-batch calls. An artefact is *dominated* when another is
faster on both by a margin; dominated artefacts are not measured over the wire.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servelab.advisor.configs import artefact_config, threads_parameters
from servelab.advisor.grid import ArtefactRef
from servelab.backends import backend_class
from servelab.backends.base import BackendContext

__all__ = ["InProcessResult", "measure_inprocess", "prune"]

Feed = dict[str, np.ndarray]


@dataclass
class InProcessResult:
    artefact: ArtefactRef
    latency_ms: float
    rows_per_s: float
    batch: int
    calls: int
    error: str | None = None


#: a full-batch call may take this share of the run's duration (a slow model gets a smaller batch) ...
_CALL_SHARE = 1 / 3
#: ... but never fewer rows than this (batching is what the full-batch figure is about)
_MIN_BATCH = 4


def _timed(fn: object, feed: Feed, duration_s: float, min_calls: int = 3) -> list[float]:
    times: list[float] = []
    deadline = time.perf_counter() + duration_s
    while len(times) < min_calls or time.perf_counter() < deadline:
        start = time.perf_counter()
        fn(feed)  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return times


def choose_batch(latency_s: float, cap: int, duration_s: float) -> int:
    """The full batch of the in-process run: as many rows as fit a third of ``duration_s`` at the one-row
    latency, at least 4, at most ``cap`` (max_batch_size and the rows at hand): a ResNet-50 on 2 cores is
    not run at batch 32 for seconds per call, a small model is."""
    fits = int(duration_s * _CALL_SHARE / latency_s) if latency_s > 0 else cap
    return max(1, min(cap, max(_MIN_BATCH, fits)))


def measure_inprocess(
    artefact: ArtefactRef, folder: Path, feed: Feed, threads: int, duration_s: float = 0.5, batch: int | None = None
) -> InProcessResult:
    """Median one-row latency and full-batch rows/s of ``artefact`` with ``threads`` runtime threads; for a
    model that does not batch, ``feed`` is one whole request: its latency, and requests/s as "rows"/s.

    ``batch`` fixes the full batch (so that artefacts compare at the same one); None chooses it from this
    artefact's one-row latency (:func:`choose_batch`)."""
    config = artefact_config(folder)
    threads_parameters(config, threads).write(config)
    batched = config.max_batch_size > 0
    cap = max(1, min(config.max_batch_size, len(next(iter(feed.values()))))) if batched else 1
    try:
        backend = backend_class(config.backend)(BackendContext(config.name, 1, folder / "1", config, threads))
        backend.load()
    except Exception as exc:  # reported as a row that could not run
        return InProcessResult(artefact, float("nan"), 0.0, batch or 1, 0, f"load failed: {exc}")
    try:
        one = {k: v[:1] for k, v in feed.items()} if batched else feed
        backend.infer(one)  # first calls pay for allocations and graph optimisation
        backend.infer(one)
        lat = _timed(backend.infer, one, duration_s / 2)
        size = 1 if not batched else min(cap, batch) if batch else choose_batch(statistics.median(lat), cap, duration_s)
        full = {k: v[:size] for k, v in feed.items()} if batched else feed
        backend.infer(full)
        thr = _timed(backend.infer, full, duration_s / 2)
    finally:
        backend.unload()
    return InProcessResult(
        artefact, statistics.median(lat) * 1e3, size * len(thr) / sum(thr), size, len(lat) + len(thr)
    )


def _dominates(a: InProcessResult, b: InProcessResult, margin: float) -> bool:
    return a.latency_ms * (1 + margin) <= b.latency_ms and a.rows_per_s >= b.rows_per_s * (1 + margin)


def prune(results: list[InProcessResult], keep: int, margin: float = 0.1) -> tuple[list[ArtefactRef], dict[str, str]]:
    """The artefacts worth serving (not dominated; the ``keep`` fastest at a full batch, and the one with the
    lowest one-row latency when it is not among them) and why each other was dropped."""
    ok = [r for r in results if r.error is None]
    why: dict[str, str] = {r.artefact.model: r.error or "" for r in results if r.error is not None}
    survivors = []
    for r in ok:
        better = next((o for o in ok if o is not r and _dominates(o, r, margin)), None)
        if better is not None:
            why[r.artefact.model] = (
                f"dominated in process by {better.artefact.label}: {better.latency_ms:.3f} vs {r.latency_ms:.3f} ms "
                f"one-row latency, {better.rows_per_s:,.0f} vs {r.rows_per_s:,.0f} rows/s at batch {r.batch}"
            )
        else:
            survivors.append(r)
    survivors.sort(key=lambda r: -r.rows_per_s)
    kept = survivors[:keep]
    # the cap ranks by a full batch's throughput; served under a latency SLA, batches are often small, and there the
    # one-row latency counts: the survivor with the lowest one is kept too (the other end of the Pareto front)
    quickest = min(survivors, key=lambda r: r.latency_ms, default=None)
    if quickest is not None and quickest not in kept:
        kept.append(quickest)
    for r in survivors:
        if r not in kept:
            why[r.artefact.model] = f"not among the {keep} fastest in process ({r.rows_per_s:,.0f} rows/s)"
    return [r.artefact for r in kept], why
