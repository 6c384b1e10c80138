"""Repository layout, version policies, auto-complete and broken models beside good ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto

from harness.models import XY, unary_onnx, write_python_model
from harness.repository import scale_model, write_config
from servelab import Engine
from servelab.errors import InvalidArgument, NotFound, Unavailable
from servelab.repository import ModelRepository

X = np.ones((1, 4), np.float32)


def test_default_policy_serves_latest_only(tmp_path: Path) -> None:
    scale_model(tmp_path, "m", {1: 1.0, 2: 2.0, 3: 3.0})
    with Engine(tmp_path) as engine:
        assert engine.get_model_metadata("m")["versions"] == ["3"]
        assert engine.infer("m", {"x": X})["y"][0, 0] == 3.0
        with pytest.raises(NotFound, match="version 1 is not found"):
            engine.infer("m", {"x": X}, version=1)


def test_latest_n_policy(tmp_path: Path) -> None:
    scale_model(tmp_path, "m", {1: 1.0, 2: 2.0, 3: 3.0}, "version_policy: { latest: { num_versions: 2 } }")
    with Engine(tmp_path) as engine:
        assert engine.get_model_metadata("m")["versions"] == ["2", "3"]
        assert engine.infer("m", {"x": X}, version=2)["y"][0, 0] == 2.0
        assert engine.infer("m", {"x": X})["y"][0, 0] == 3.0


def test_all_policy(tmp_path: Path) -> None:
    scale_model(tmp_path, "m", {1: 1.0, 2: 2.0, 3: 3.0}, "version_policy: { all: {} }")
    with Engine(tmp_path) as engine:
        assert engine.get_model_metadata("m")["versions"] == ["1", "2", "3"]
        for v in (1, 2, 3):
            assert engine.infer("m", {"x": X}, version=v)["y"][0, 0] == float(v)


def test_specific_policy_and_missing_version(tmp_path: Path) -> None:
    scale_model(tmp_path, "m", {1: 1.0, 2: 2.0, 3: 3.0}, "version_policy: { specific: { versions: [1, 3] } }")
    scale_model(tmp_path, "bad", {1: 1.0}, "version_policy: { specific: { versions: [7] } }")
    with Engine(tmp_path) as engine:
        assert engine.get_model_metadata("m")["versions"] == ["1", "3"]
        assert not engine.is_model_ready("bad")
        index = {r["name"]: r for r in engine.get_model_repository_index()}
        assert index["bad"]["state"] == "UNAVAILABLE"
        assert "specific lists [7]" in index["bad"]["reason"]


def test_version_folders_starting_with_zero_are_ignored(tmp_path: Path) -> None:
    scale_model(tmp_path, "m", {1: 1.0})
    unary_onnx(tmp_path / "m" / "0" / "model.onnx", io=XY)
    unary_onnx(tmp_path / "m" / "007" / "model.onnx", io=XY)
    with Engine(tmp_path) as engine:
        assert engine.get_model_metadata("m")["versions"] == ["1"]


def test_folders_starting_with_dot_or_underscore_are_not_models(tmp_path: Path) -> None:
    scale_model(tmp_path, "m", {1: 1.0})
    (tmp_path / "_graphs" / "demo").mkdir(parents=True)  # data beside the models, e.g. a graph store
    (tmp_path / ".cache").mkdir()
    assert ModelRepository(tmp_path).model_names() == ["m"]


def test_autocomplete_from_onnx_without_config(tmp_path: Path) -> None:
    unary_onnx(tmp_path / "auto" / "1" / "model.onnx", elem_type=TensorProto.INT64, dims=("batch", 3), io=XY)
    with Engine(tmp_path) as engine:
        config = engine.get_model_config("auto")
        assert config["backend"] == "onnxruntime"
        assert config["max_batch_size"] > 0
        assert config["input"][0]["name"] == "x" and config["input"][0]["data_type"] == "TYPE_INT64"
        x = np.arange(6, dtype=np.int64).reshape(2, 3)
        np.testing.assert_array_equal(engine.infer("auto", {"x": x})["y"], x)


def test_partial_config_is_completed_and_kept(tmp_path: Path) -> None:
    unary_onnx(tmp_path / "p" / "1" / "model.onnx", io=XY)
    write_config(tmp_path / "p", 'name: "p"\nmax_batch_size: 2\n')
    with Engine(tmp_path) as engine:
        config = engine.get_model_config("p")
        assert config["max_batch_size"] == 2
        assert [o["name"] for o in config["output"]] == ["y"]


def test_config_mismatching_model_is_reported(tmp_path: Path) -> None:
    unary_onnx(tmp_path / "mm" / "1" / "model.onnx", io=XY)
    write_config(
        tmp_path / "mm",
        'name: "mm"\nmax_batch_size: 4\ninput [ { name: "x", data_type: TYPE_INT32, dims: [4] } ]\n',
    )
    repo = ModelRepository(tmp_path)
    with pytest.raises(InvalidArgument, match="'x'"):
        repo.read("mm")


def test_python_model_without_io_says_what_to_add(tmp_path: Path) -> None:
    write_python_model(tmp_path / "py", "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n")
    with pytest.raises(InvalidArgument, match="add e.g."):
        ModelRepository(tmp_path).read("py")


def test_broken_models_leave_good_ones_serving(tmp_path: Path) -> None:
    scale_model(tmp_path, "good", {1: 2.0})
    bad = tmp_path / "corrupt" / "1"
    bad.mkdir(parents=True)
    (bad / "model.onnx").write_bytes(b"this is not an onnx file")
    write_config(tmp_path / "nofile", 'name: "nofile"\nbackend: "onnxruntime"\n')
    (tmp_path / "nofile" / "1").mkdir()
    write_config(tmp_path / "badtext", "name: 'badtext' max_batch_size: {{{\n")
    (tmp_path / "badtext" / "1").mkdir()
    with Engine(tmp_path) as engine:
        assert engine.infer("good", {"x": X})["y"][0, 0] == 2.0
        index = {r["name"]: r for r in engine.get_model_repository_index()}
        for name in ("corrupt", "nofile", "badtext"):
            assert index[name]["state"] == "UNAVAILABLE", name
            assert index[name]["reason"], name
            with pytest.raises(Unavailable, match="not ready"):
                engine.infer(name, {"x": X})
        assert "model.onnx does not exist" in index["nofile"]["reason"]
        assert "config.pbtxt" in index["badtext"]["reason"]


def test_missing_repository_and_unknown_model(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="does not exist"):
        Engine(tmp_path / "nope")
    scale_model(tmp_path, "m", {1: 1.0})
    with Engine(tmp_path) as engine, pytest.raises(NotFound, match="Request for unknown model: 'zzz'"):
        engine.infer("zzz", {"x": X})


def test_name_mismatch_between_config_and_folder(tmp_path: Path) -> None:
    scale_model(tmp_path, "m", {1: 1.0})
    text = (tmp_path / "m" / "config.pbtxt").read_text().replace('name: "m"', 'name: "other"')
    (tmp_path / "m" / "config.pbtxt").write_text(text)
    with pytest.raises(InvalidArgument, match="differs from its folder"):
        ModelRepository(tmp_path).read("m")
