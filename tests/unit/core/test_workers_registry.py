"""Worker processes as the registry sees them: each instance loaded once, readiness while a worker
restarts, the per-model cap, and which schedulers may run on the event loop."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from harness.data import weights
from harness.models import XY, pid_py
from harness.repository import dense_model, pid_model
from servelab.config.settings import ControlMode, WorkerSettings
from servelab.core.dataplane import DataPlane
from servelab.core.registry import ModelRegistry
from servelab.core.workers import WorkerPool
from servelab.engine import Engine
from servelab.errors import Unavailable
from servelab.repository import ModelRepository


def _python_model(repo: Path, name: str, count: int = 1) -> Path:
    """y = 2x and its pid, ``count`` instances; each load appends its pid to <model folder>/loads.txt."""
    return pid_model(repo, name, pid_py(2, log_loads=True), [4],
                     extra=f"instance_group [{{ count: {count} kind: KIND_CPU }}]\n")


def _onnx_model(repo: Path, name: str) -> None:
    dense_model(repo, name, weights(4, 4), io=XY)


def _ensemble(repo: Path, name: str, first: str, second: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        'input [{ name: "x" data_type: TYPE_FP32 dims: [4] }]\noutput [{ name: "out" data_type: TYPE_FP32 dims: [4] }]\n'
        "ensemble_scheduling { step [\n"
        f'  {{ model_name: "{first}" model_version: -1 input_map {{ key: "x" value: "x" }} '
        'output_map { key: "y" value: "mid" } },\n'
        f'  {{ model_name: "{second}" model_version: -1 input_map {{ key: "x" value: "mid" }} '
        'output_map { key: "y" value: "out" } }\n] }\n'
    )


def _dataplane(repo: Path, **settings: float) -> DataPlane:
    registry = ModelRegistry(ModelRepository([repo]), ControlMode.EXPLICIT,
                             workers=WorkerPool(WorkerSettings(**settings), 60.0))  # type: ignore[arg-type]
    dataplane = DataPlane(registry)
    dataplane.startup(["*"])
    return dataplane


def _until(predicate: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)  # poll interval, not synchronisation


def test_each_python_instance_is_loaded_once_in_its_own_worker(tmp_path: Path) -> None:
    model_dir = _python_model(tmp_path, "py", count=2)
    with Engine(tmp_path) as engine:
        pids = [int(p) for p in (model_dir / "loads.txt").read_text().split()]
        assert len(pids) == 2 and len(set(pids)) == 2 and os.getpid() not in pids
        workers = engine.get_inference_statistics("py")["model_stats"][0]["workers"]
        assert sorted(w["pid"] for w in workers) == sorted(pids)
        assert all(w["state"] == "READY" and w["restarts"] == 0 for w in workers)


def test_a_version_is_not_ready_while_its_worker_restarts_and_other_models_serve_on(tmp_path: Path) -> None:
    _python_model(tmp_path, "py")
    _onnx_model(tmp_path, "other")
    dataplane = _dataplane(tmp_path, restart_backoff_s=3.0)
    x = np.ones((1, 4), np.float32)
    try:
        pid = dataplane.statistics("py")["model_stats"][0]["workers"][0]["pid"]
        os.kill(pid, signal.SIGKILL)
        _until(lambda: not dataplane.model_ready("py"), 10.0)
        with pytest.raises(Unavailable, match=r"model 'py' version 1 is not ready: .*SIGKILL"):
            dataplane.infer_arrays("py", {"x": x})
        row = next(r for r in dataplane.repository_index() if r["name"] == "py")
        assert row["state"] == "UNAVAILABLE" and "SIGKILL" in row["reason"]
        assert dataplane.model_ready("other") and dataplane.infer_arrays("other", {"x": x})["y"].shape == (1, 4)
        _until(lambda: dataplane.model_ready("py"))
        out = dataplane.infer_arrays("py", {"x": x})
        worker = dataplane.statistics("py")["model_stats"][0]["workers"][0]
        assert worker["restarts"] == 1 and worker["pid"] == int(out["pid"][0, 0]) != pid
    finally:
        dataplane.close()


def test_more_workers_than_the_cap_are_refused(tmp_path: Path) -> None:
    _python_model(tmp_path, "py", count=3)
    dataplane = _dataplane(tmp_path, max_workers_per_model=2)
    try:
        assert not dataplane.model_ready("py")
        row = next(r for r in dataplane.repository_index() if r["name"] == "py")
        assert "asks for 3 worker processes" in row["reason"] and "at most 2" in row["reason"]
    finally:
        dataplane.close()


def test_only_never_blocking_models_and_ensembles_of_them_may_run_on_the_loop(tmp_path: Path) -> None:
    _onnx_model(tmp_path, "a")
    _python_model(tmp_path, "p")
    _ensemble(tmp_path, "tensors_only", "a", "a")
    _ensemble(tmp_path, "with_python", "a", "p")
    dataplane = _dataplane(tmp_path)
    try:
        get = dataplane.router.resolve
        assert get("a").scheduler.never_blocks and not get("p").scheduler.never_blocks
        assert get("tensors_only").scheduler.never_blocks
        assert not get("with_python").scheduler.never_blocks
        out = dataplane.infer_arrays("with_python", {"x": np.ones((2, 4), np.float32)})
        assert out["out"].shape == (2, 4)
    finally:
        dataplane.close()
