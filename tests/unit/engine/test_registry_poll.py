"""Model control: explicit load/unload, poll mode picking up changes, failed reloads keep serving."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from harness.repository import scale_model, write_config
from servelab import Engine
from servelab.config import ControlMode
from servelab.core.registry import ModelRegistry
from servelab.errors import NotFound, Unavailable, Unsupported
from servelab.repository import ModelRepository

X = np.ones((1, 4), np.float32)


def _touch_later(path: Path) -> None:
    """Make sure a rewritten file gets a different mtime even on coarse clocks."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_explicit_mode_loads_only_named_models(tmp_path: Path) -> None:
    scale_model(tmp_path, "a", {1: 1.0})
    scale_model(tmp_path, "b", {1: 2.0})
    with Engine(tmp_path, load_models=["a"]) as engine:
        assert engine.is_model_ready("a") and not engine.is_model_ready("b")
        engine.load_model("b")
        assert engine.infer("b", {"x": X})["y"][0, 0] == 2.0
        engine.unload_model("a")
        assert not engine.is_model_ready("a")
        with pytest.raises(Unavailable, match="unloaded"):
            engine.infer("a", {"x": X})
        with pytest.raises(NotFound):
            engine.load_model("nope")


def test_none_mode_refuses_repository_control(tmp_path: Path) -> None:
    scale_model(tmp_path, "a", {1: 1.0})
    with Engine(tmp_path, model_control_mode="none") as engine:
        assert engine.is_model_ready("a")
        with pytest.raises(Unsupported, match="explicit"):
            engine.unload_model("a")


def test_load_with_config_override(tmp_path: Path) -> None:
    scale_model(tmp_path, "a", {1: 1.0, 2: 2.0})
    with Engine(tmp_path) as engine:
        assert engine.get_model_metadata("a")["versions"] == ["2"]
        engine.load_model("a", '{"backend": "onnxruntime", "max_batch_size": 8, "version_policy": {"all": {}}}')
        assert engine.get_model_metadata("a")["versions"] == ["1", "2"]


def test_poll_picks_up_new_version_changed_config_and_new_model(tmp_path: Path) -> None:
    scale_model(tmp_path, "m", {1: 1.0})
    registry = ModelRegistry(ModelRepository(tmp_path), ControlMode.POLL)
    registry.startup()
    try:
        assert registry.poll() == []
        scale_model(tmp_path, "m", {2: 2.0})  # a new version folder
        assert registry.poll() == ["m"]
        assert sorted(registry.record("m").versions) == [2]
        # a changed config: serve every version
        cfg = tmp_path / "m" / "config.pbtxt"
        cfg.write_text(cfg.read_text() + "version_policy: { all: {} }\n")
        _touch_later(cfg)
        assert registry.poll() == ["m"]
        assert sorted(registry.record("m").versions) == [1, 2]
        scale_model(tmp_path, "fresh", {1: 5.0})
        assert "fresh" in registry.poll()
        assert registry.is_ready("fresh")
    finally:
        registry.close()


def test_failed_reload_keeps_old_version_serving(tmp_path: Path) -> None:
    scale_model(tmp_path, "m", {1: 1.0})
    with Engine(tmp_path, model_control_mode="poll", poll_secs=3600) as engine:
        registry = engine.dataplane.registry
        bad = tmp_path / "m" / "2"
        bad.mkdir()
        (bad / "model.onnx").write_bytes(b"garbage")
        assert registry.poll() == ["m"]
        assert engine.infer("m", {"x": X})["y"][0, 0] == 1.0  # v1 still serves
        record = registry.record("m")
        assert record.state.value == "READY" and record.reason
        assert registry.poll() == []  # the same broken files are not retried every poll
        (bad / "model.onnx").unlink()
        scale_model(tmp_path, "m", {2: 2.0})
        assert registry.poll() == ["m"]
        assert engine.infer("m", {"x": X})["y"][0, 0] == 2.0


def test_removed_model_is_unloaded_by_poll(tmp_path: Path) -> None:
    scale_model(tmp_path, "m", {1: 1.0})
    scale_model(tmp_path, "gone", {1: 1.0})
    with Engine(tmp_path, model_control_mode="poll", poll_secs=3600) as engine:
        import shutil

        shutil.rmtree(tmp_path / "gone")
        assert engine.dataplane.registry.poll() == ["gone"]
        assert not engine.is_model_ready("gone") and engine.is_model_ready("m")


def test_background_poller_reloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scale_model(tmp_path, "m", {1: 1.0})
    written = threading.Event()  # version 2 is completely on disk
    polled_after = threading.Event()  # a background poll that began after that has finished
    real_poll = ModelRegistry.poll

    def poll(self: ModelRegistry) -> list[str]:  # the real poll, observed
        after = written.is_set()
        changed = real_poll(self)
        if after:
            polled_after.set()
        return changed

    monkeypatch.setattr(ModelRegistry, "poll", poll)
    with Engine(tmp_path, model_control_mode="poll", poll_secs=0.1) as engine:
        scale_model(tmp_path, "m", {2: 2.0})
        written.set()
        assert polled_after.wait(30), "the background poller did not run"
        assert engine.get_model_metadata("m")["versions"] == ["2"]
        assert engine.infer("m", {"x": X})["y"][0, 0] == 2.0


def test_unload_waits_for_in_flight_requests(tmp_path: Path) -> None:
    scale_model(tmp_path, "m", {1: 1.0})
    with Engine(tmp_path) as engine:
        lv = engine.dataplane.router.resolve("m")
        lv.scheduler._enter()  # a request in flight
        done = threading.Event()

        def unload() -> None:
            engine.unload_model("m")
            done.set()

        t = threading.Thread(target=unload)
        t.start()
        assert not done.wait(0.3)  # unload is draining
        lv.scheduler._leave()
        assert done.wait(5)
        t.join()


def test_unload_dependents_unloads_an_ensembles_steps(tmp_path: Path) -> None:
    scale_model(tmp_path, "first", {1: 2.0})
    scale_model(tmp_path, "second", {1: 3.0})
    (tmp_path / "chain" / "1").mkdir(parents=True)
    write_config(
        tmp_path / "chain",
        'platform: "ensemble"\nmax_batch_size: 8\n'
        'input [ { name: "x", data_type: TYPE_FP32, dims: [4] } ]\n'
        'output [ { name: "z", data_type: TYPE_FP32, dims: [4] } ]\n'
        "ensemble_scheduling { step [\n"
        '  { model_name: "first" model_version: -1 input_map { key: "x" value: "x" } output_map { key: "y" value: "mid" } },\n'
        '  { model_name: "second" model_version: -1 input_map { key: "x" value: "mid" } output_map { key: "y" value: "z" } }\n'
        "] }\n",
    )
    with Engine(tmp_path) as engine:
        assert engine.infer("chain", {"x": X})["z"][0, 0] == 6.0
        engine.dataplane.unload_model("chain")
        assert engine.is_model_ready("first") and engine.is_model_ready("second")
        engine.load_model("chain")
        engine.dataplane.unload_model("chain", unload_dependents=True)
        assert not any(engine.is_model_ready(m) for m in ("chain", "first", "second"))
