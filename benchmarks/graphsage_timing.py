"""The in-process GraphSAGE timing loop that benchmarks/graphsage.py's rows and the in-process rows of
benchmarks/graphsage_e2e.py share: one pipeline call per batch of node ids, stage times per call.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from servelab.graph.sampler import NumbaSampler, PythonSampler, gather_features
from servelab.graph.sessions import LayersFn
from servelab.graph.store import GraphStore

__all__ = ["PipelineFn", "Row", "measure", "pipeline"]

#: one call: node ids -> (sample_ns, gather_ns, layers_ns)
PipelineFn = Callable[[np.ndarray], tuple[int, int, int]]


@dataclass
class Row:
    """One (configuration, batch size) row: latency percentiles, throughput and each stage's share."""

    config: str
    batch: int
    calls: int
    p50_us: float
    p99_us: float
    mean_us: float
    nodes_per_s: float
    sample_share: float
    gather_share: float
    layers_share: float
    speedup_p50: float = math.nan
    throughput_ratio: float = math.nan


def pipeline(sampler: NumbaSampler | PythonSampler, store: GraphStore, layers: LayersFn) -> PipelineFn:
    """Sample, gather, run the layers: one call, its three stage times in nanoseconds."""

    def call(ids: np.ndarray) -> tuple[int, int, int]:
        t0 = time.perf_counter_ns()
        block = sampler.sample(ids)
        t1 = time.perf_counter_ns()
        x = gather_features(store, block.nodes)
        t2 = time.perf_counter_ns()
        layers(x, block.nbr1, block.nbr2)
        return t1 - t0, t2 - t1, time.perf_counter_ns() - t2

    return call


def measure(
    name: str, fn: PipelineFn, queries: np.ndarray, batch: int, min_calls: int, budget_s: float
) -> Row:
    """``fn`` over batches of ``queries`` (at least ``min_calls``, within ``budget_s`` after warm-up)."""
    calls = max(len(queries) // batch, min_calls)
    order = np.resize(queries, calls * batch).reshape(calls, batch)
    for ids in order[: min(20, calls)]:  # warm-up: compile, allocate, fill caches
        fn(ids)
    stages = np.zeros((calls, 3), np.int64)
    deadline = time.perf_counter() + budget_s
    done = 0
    for done, ids in enumerate(order, start=1):
        stages[done - 1] = fn(ids)
        if time.perf_counter() > deadline:
            break
    stages = stages[:done]
    total = stages.sum(axis=1) / 1e3  # us
    share = stages.sum(axis=0) / max(int(stages.sum()), 1)
    return Row(
        config=name,
        batch=batch,
        calls=done,
        p50_us=float(np.percentile(total, 50)),
        p99_us=float(np.percentile(total, 99)),
        mean_us=float(total.mean()),
        nodes_per_s=float(batch * done / (total.sum() / 1e6)),
        sample_share=float(share[0]),
        gather_share=float(share[1]),
        layers_share=float(share[2]),
    )
