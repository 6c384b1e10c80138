"""OnnxRuntimeBackend: parity with torch eager, every datatype, auto-complete, execute, parameters."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from backends_testutil import ONNX_TYPES, ctx, eager, identity_onnx, mlp, rows
from onnx import TensorProto, helper

from servelab.backends.onnxruntime import OnnxRuntimeBackend
from servelab.convert.export import export_onnx
from servelab.errors import InternalError, InvalidArgument, Unsupported
from servelab.protocol import model_config_pb2 as mc
from servelab.types import DataType


@pytest.fixture(scope="module")
def mlp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    version_dir = tmp_path_factory.mktemp("ort") / "1"
    export_onnx(mlp(), torch.zeros(2, 16), version_dir / "model.onnx", ["x"], ["y"])
    return version_dir


def _loaded(version_dir: Path, config: mc.ModelConfig | None = None) -> OnnxRuntimeBackend:
    config = config or mc.ModelConfig(name="m", backend="onnxruntime")
    OnnxRuntimeBackend.autocomplete(config, version_dir)
    backend = OnnxRuntimeBackend(ctx(version_dir, config))
    backend.load()
    return backend


@pytest.mark.parametrize("batch", [1, 32])
def test_mlp_matches_torch_eager(mlp_dir: Path, batch: int) -> None:
    backend = _loaded(mlp_dir)
    x = rows(batch)
    out = backend.infer({"x": x})
    assert list(out) == ["y"] and out["y"].shape == (batch, 8)
    np.testing.assert_allclose(out["y"], eager(mlp(), x), atol=1e-5, rtol=0)


def test_autocomplete_fills_everything(mlp_dir: Path) -> None:
    config = mc.ModelConfig(name="m")
    OnnxRuntimeBackend.autocomplete(config, mlp_dir)
    assert config.max_batch_size == 4
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [("x", mc.TYPE_FP32, [16])]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [("y", mc.TYPE_FP32, [8])]


def test_autocomplete_keeps_what_the_user_wrote(mlp_dir: Path) -> None:
    config = mc.ModelConfig(name="m", max_batch_size=64)
    config.output.add(name="y", data_type=mc.TYPE_FP32, dims=[-1])
    OnnxRuntimeBackend.autocomplete(config, mlp_dir)
    assert config.max_batch_size == 64
    assert list(config.output[0].dims) == [-1]
    assert [t.name for t in config.input] == ["x"]


def test_autocomplete_full_rank_dims_mean_no_batching(mlp_dir: Path) -> None:
    config = mc.ModelConfig(name="m")
    config.input.add(name="x", data_type=mc.TYPE_FP32, dims=[-1, 16])
    OnnxRuntimeBackend.autocomplete(config, mlp_dir)
    assert config.max_batch_size == 0
    assert list(config.output[0].dims) == [-1, 8]


@pytest.mark.parametrize(
    ("tensor", "match"),
    [
        (
            mc.ModelInput(name="x", data_type=mc.TYPE_FP16, dims=[16]),
            "input 'x': config data_type TYPE_FP16 but the model has TYPE_FP32",
        ),
        (
            mc.ModelInput(name="x", data_type=mc.TYPE_FP32, dims=[4, 4, 16]),
            r"input 'x': config dims \[4, 4, 16\] \(rank 3\)",
        ),
        (
            mc.ModelInput(name="x", data_type=mc.TYPE_FP32, dims=[15]),
            r"config dims \[15\] but the model has dims \[16\]",
        ),
        (
            mc.ModelInput(name="nope", data_type=mc.TYPE_FP32, dims=[16]),
            r"config input 'nope' is not in the model.*\['x'\]",
        ),
    ],
)
def test_autocomplete_mismatch_names_tensor_and_values(
    mlp_dir: Path, tensor: mc.ModelInput, match: str
) -> None:
    config = mc.ModelConfig(name="m", max_batch_size=8)
    config.input.append(tensor)
    with pytest.raises(InvalidArgument, match=match):
        OnnxRuntimeBackend.autocomplete(config, mlp_dir)


def test_autocomplete_batching_config_on_fixed_model(tmp_path: Path) -> None:
    identity_onnx(tmp_path / "model.onnx", ONNX_TYPES["FP32"], [3, 4])
    config = mc.ModelConfig(name="m", max_batch_size=8)
    with pytest.raises(InvalidArgument, match="tensor 'x' has a fixed first dimension"):
        OnnxRuntimeBackend.autocomplete(config, tmp_path)
    config = mc.ModelConfig(name="m")
    OnnxRuntimeBackend.autocomplete(config, tmp_path)
    assert config.max_batch_size == 0 and list(config.input[0].dims) == [3, 4]


def _sample(dtype: DataType) -> np.ndarray:
    if dtype is DataType.BYTES:
        return np.array([[b"a", b"\xc3\xa9t\xc3\xa9", b""], [b"x", b"y", b"zz"]], dtype=object)
    return (np.arange(6).reshape(2, 3) % 2 if dtype is DataType.BOOL else np.arange(6).reshape(2, 3)).astype(
        dtype.numpy_dtype
    )


@pytest.mark.parametrize("name", list(ONNX_TYPES))
def test_identity_echoes_every_datatype(tmp_path: Path, name: str) -> None:
    identity_onnx(tmp_path / "model.onnx", ONNX_TYPES[name], ["batch", 3])
    backend = _loaded(tmp_path)
    dtype = DataType(name)
    assert backend.config.input[0].data_type == mc.DataType.Value(dtype.triton_name)
    x = _sample(dtype)
    y = backend.infer({"x": x})["y"]
    assert y.dtype == dtype.numpy_dtype and y.shape == x.shape
    assert y.tobytes() == x.tobytes() if dtype is not DataType.BYTES else y.tolist() == x.tolist()


def test_execute_splits_rows_and_isolates_a_bad_request(mlp_dir: Path) -> None:
    backend = _loaded(mlp_dir)
    reqs = [{"x": rows(n, seed=n)} for n in (1, 3, 5)]
    results = backend.execute(reqs)
    for req, res in zip(reqs, results, strict=True):
        assert isinstance(res, dict)
        np.testing.assert_allclose(res["y"], eager(mlp(), req["x"]), atol=1e-5, rtol=0)


def test_a_request_that_fails_at_run_time_fails_alone(tmp_path: Path) -> None:
    table = helper.make_tensor("table", TensorProto.FLOAT, [4, 2], np.arange(8, dtype=np.float32).tolist())
    idx = helper.make_tensor_value_info("idx", TensorProto.INT64, ["batch"])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 2])
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "idx"], ["out"])], "g", [idx], [out], [table]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(tmp_path / "model.onnx"))
    backend = _loaded(tmp_path)
    assert backend.config.max_batch_size == 4 and list(backend.config.input[0].dims) == []
    good = [{"idx": np.array([0, 3])}, {"idx": np.array([1])}]
    bad = {"idx": np.array([2, 9])}  # index 9 is out of the table: ORT fails at run time
    results = backend.execute([good[0], bad, good[1]])
    assert isinstance(results[1], InternalError) and "model 'm'" in results[1].message
    assert isinstance(results[0], dict) and isinstance(results[2], dict)
    np.testing.assert_array_equal(results[0]["out"], [[0, 1], [6, 7]])
    np.testing.assert_array_equal(results[2]["out"], [[2, 3]])


def test_parameters_are_applied_and_checked(mlp_dir: Path) -> None:
    config = mc.ModelConfig(name="m")
    for key, value in {
        "intra_op_thread_count": "2",
        "inter_op_thread_count": "1",
        "graph_optimization_level": "basic",
        "allow_spinning": "0",
    }.items():
        config.parameters[key].string_value = value
    backend = _loaded(mlp_dir, config)
    assert backend.session is not None
    assert backend.session.get_session_options().intra_op_num_threads == 2
    assert backend.infer({"x": rows(2)})["y"].shape == (2, 8)
    config.parameters["graph_optimization_level"].string_value = "max"
    with pytest.raises(InvalidArgument, match=r"graph_optimization_level.*'max'"):
        OnnxRuntimeBackend(ctx(mlp_dir, config)).load()
    config.parameters["graph_optimization_level"].string_value = "all"
    config.parameters["execution_providers"].string_value = "NoSuchExecutionProvider"
    with pytest.raises(Unsupported, match="NoSuchExecutionProvider"):
        OnnxRuntimeBackend(ctx(mlp_dir, config)).load()


def test_gpu_instance_group_falls_back_to_cpu_here(mlp_dir: Path) -> None:
    config = mc.ModelConfig(name="m")
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_GPU)
    backend = _loaded(mlp_dir, config)
    assert backend.session is not None
    assert "CPUExecutionProvider" in backend.session.get_providers()


def test_missing_model_file_is_clear(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"no model file .*\['model.onnx'\]"):
        OnnxRuntimeBackend.autocomplete(mc.ModelConfig(name="m"), tmp_path)
