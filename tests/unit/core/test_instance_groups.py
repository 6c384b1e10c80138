"""Instance groups: the scheduler a config gets, worker processes for GIL-holding runtimes, and real
ONNX models served through the Engine with several instances and dynamic batching."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from batching_testutil import (
    HOLD,
    DoublingBackend,
    GilBackend,
    LoadFailingBackend,
    config,
    context,
    doubling,
    rows,
    stats,
)

from harness.data import weights
from harness.gates import ThreadGate
from harness.models import XY, pid_py
from harness.repository import dense_model, pid_model
from servelab.backends.base import Backend
from servelab.core.batching import DynamicBatcher, make_scheduler
from servelab.core.scheduling import DirectScheduler
from servelab.core.workers import WorkerInstance, WorkerPool, runs_in_worker
from servelab.engine import Engine
from servelab.errors import InternalError, InvalidArgument


def test_config_picks_the_scheduler() -> None:
    plain, batching = config(4), config(4, delay_us=100)
    direct = make_scheduler(doubling(plain), stats(), plain)
    batcher = make_scheduler(doubling(batching), stats(), batching)
    try:
        assert type(direct) is DirectScheduler and type(batcher) is DynamicBatcher
        assert direct.cache is None and batcher.cache is None
        np.testing.assert_array_equal(direct.run({"x": rows(2)})["y"], 2 * rows(2))
    finally:
        direct.close()
        batcher.close()


def test_direct_scheduler_spreads_requests_over_instances() -> None:
    cfg = config(4)
    gate = ThreadGate()
    backends = doubling(cfg, n=2, gate=gate)
    s = make_scheduler(backends, stats(), cfg)

    async def main() -> list[int]:
        calls = [asyncio.create_task(s.run_async({"x": rows(1, value=HOLD)})) for _ in range(4)]
        await gate.entered_async(2)  # two requests in flight at once ...
        while_held = [b.calls for b in backends]  # ... one on each instance
        gate.open()
        await asyncio.gather(*calls)
        return while_held

    try:
        assert asyncio.run(main()) == [1, 1]
    finally:
        s.close()
    assert sum(b.calls for b in backends) == 4 and s.stats.execution_count == 4


def _workers(cls: type[Backend], cfg: object, n: int) -> list[Backend]:
    pool = WorkerPool()
    workers = [pool.instance(context(cfg), cls) for _ in range(n)]  # type: ignore[arg-type]
    for w in workers:
        w.start()
    for w in workers:
        w.load()
    return list(workers)


def test_gil_holding_runtime_runs_in_worker_processes() -> None:
    cfg = config(4, delay_us=0)
    cfg.output.add(name="pid", data_type=cfg.input[0].data_type, dims=[1])
    assert runs_in_worker(GilBackend, cfg)  # decided from the class and config, before building anything
    instances = _workers(GilBackend, cfg, 2)
    s = make_scheduler(instances, stats(), cfg)
    try:
        pids = {b.pid for b in instances}  # type: ignore[attr-defined]
        assert os.getpid() not in pids and len(pids) == 2
        xs = [rows(2, seed=i) for i in range(12)]
        with ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(lambda x: s.run({"x": x}), xs))
        for x, out in zip(xs, outs, strict=True):
            np.testing.assert_array_equal(out["y"], 2 * x)
        seen = {int(p) for out in outs for p in out["pid"].ravel()}
        assert seen <= pids and os.getpid() not in seen
    finally:
        s.close()
        for b in instances:
            b.unload()
    assert all(b._proc.poll() is not None for b in instances)  # type: ignore[attr-defined]


def test_instance_mode_thread_keeps_gil_runtimes_in_process() -> None:
    cfg = config(4, params={"instance_mode": "thread"})
    cfg.output.add(name="pid", data_type=cfg.input[0].data_type, dims=[1])
    assert not runs_in_worker(GilBackend, cfg)
    instances: list[Backend] = [GilBackend(context(cfg))]
    instances[0].load()
    s = make_scheduler(instances, stats(), cfg)
    try:
        assert int(s.run({"x": rows(1)})["pid"][0, 0]) == os.getpid()
    finally:
        s.close()


def test_instance_mode_process_isolates_any_runtime_and_a_bad_mode_is_refused() -> None:
    assert not runs_in_worker(DoublingBackend, config(4))
    assert runs_in_worker(DoublingBackend, config(4, params={"instance_mode": "process"}))
    with pytest.raises(InvalidArgument, match="instance_mode' must be 'auto', 'thread' or 'process'"):
        runs_in_worker(GilBackend, config(4, params={"instance_mode": "fork"}))


def test_a_worker_that_fails_to_load_fails_the_load() -> None:
    cfg = config(4)
    worker = WorkerPool().instance(context(cfg), LoadFailingBackend)
    with pytest.raises(InternalError, match="failed to load in its worker process: RuntimeError: cannot open"):
        worker.load()
    assert worker._proc is not None and worker._proc.poll() is not None


def _repo(root: Path, body: str) -> np.ndarray:
    w = weights(4, 3)
    dense_model(root, "lin", w, io=XY, extra=body)
    return w


def test_onnx_instance_group_with_dynamic_batching_through_the_engine(tmp_path: Path) -> None:
    w = _repo(tmp_path, "instance_group [{ count: 2 kind: KIND_CPU }]\n"
                        "dynamic_batching { max_queue_delay_microseconds: 20000 }\n")
    with Engine(tmp_path) as engine:
        lv = engine.dataplane.router.resolve("lin")
        assert isinstance(lv.scheduler, DynamicBatcher) and len(lv.instances) == 2
        assert all(b.ctx.threads == max(1, engine.dataplane.registry.cores // 2) for b in lv.instances)
        xs = [rows(1, seed=i) for i in range(32)]
        with ThreadPoolExecutor(16) as pool:
            outs = list(pool.map(lambda x: engine.infer("lin", {"x": x}), xs))
        for x, out in zip(xs, outs, strict=True):
            np.testing.assert_allclose(out["y"], x @ w, rtol=1e-5, atol=1e-5)
        s = engine.get_inference_statistics("lin")["model_stats"][0]
        assert s["inference_count"] == 32 and s["execution_count"] < 32  # requests were merged
        assert s["inference_stats"]["success"]["count"] == 32


def test_python_backend_instances_run_in_worker_processes(tmp_path: Path) -> None:
    pid_model(tmp_path, "py", pid_py(2), [4], extra="instance_group [{ count: 2 kind: KIND_CPU }]\n")
    with Engine(tmp_path) as engine:
        lv = engine.dataplane.router.resolve("py")
        workers = [b for b in lv.instances if isinstance(b, WorkerInstance)]
        assert len(workers) == len(lv.instances) == 2
        outs = [engine.infer("py", {"x": rows(2, seed=i)}) for i in range(4)]
        for i, out in enumerate(outs):
            np.testing.assert_array_equal(out["y"], 2 * rows(2, seed=i))
        assert {int(o["pid"][0, 0]) for o in outs} == {b.pid for b in workers}
    assert all(b._proc is not None and b._proc.poll() is not None for b in workers)
