"""OnnxRuntimeBackend: every datatype, auto-complete, execute, parameters (parity with torch eager:
test_mlp_every_runtime)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from harness.backends import assert_like_eager, context, loaded, mlp_rows
from harness.data import sample
from harness.models import DTYPES, XY, save_onnx, tensor, unary_onnx
from servelab.backends.onnxruntime import OnnxRuntimeBackend
from servelab.errors import InternalError, InvalidArgument, Unsupported
from servelab.protocol import model_config_pb2 as mc
from servelab.types import DataType


def _loaded(version_dir: Path, config: mc.ModelConfig | None = None) -> OnnxRuntimeBackend:
    return loaded(OnnxRuntimeBackend, version_dir, config or mc.ModelConfig(name="m", backend="onnxruntime"))


def test_autocomplete_keeps_what_the_user_wrote(onnx_dir: Path) -> None:
    config = mc.ModelConfig(name="m", max_batch_size=64)
    config.output.add(name="y", data_type=mc.TYPE_FP32, dims=[-1])
    OnnxRuntimeBackend.autocomplete(config, onnx_dir)
    assert config.max_batch_size == 64
    assert list(config.output[0].dims) == [-1]
    assert [t.name for t in config.input] == ["x"]


def test_autocomplete_full_rank_dims_mean_no_batching(onnx_dir: Path) -> None:
    config = mc.ModelConfig(name="m")
    config.input.add(name="x", data_type=mc.TYPE_FP32, dims=[-1, 16])
    OnnxRuntimeBackend.autocomplete(config, onnx_dir)
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
    onnx_dir: Path, tensor: mc.ModelInput, match: str
) -> None:
    config = mc.ModelConfig(name="m", max_batch_size=8)
    config.input.append(tensor)
    with pytest.raises(InvalidArgument, match=match):
        OnnxRuntimeBackend.autocomplete(config, onnx_dir)


def test_autocomplete_batching_config_on_fixed_model(tmp_path: Path) -> None:
    unary_onnx(tmp_path / "model.onnx", dims=[3, 4], io=XY)
    config = mc.ModelConfig(name="m", max_batch_size=8)
    with pytest.raises(InvalidArgument, match="tensor 'x' has a fixed first dimension"):
        OnnxRuntimeBackend.autocomplete(config, tmp_path)
    config = mc.ModelConfig(name="m")
    OnnxRuntimeBackend.autocomplete(config, tmp_path)
    assert config.max_batch_size == 0 and list(config.input[0].dims) == [3, 4]


@pytest.mark.parametrize("name", list(DTYPES))
def test_identity_echoes_every_datatype(tmp_path: Path, name: str) -> None:
    unary_onnx(tmp_path / "model.onnx", elem_type=DTYPES[name], dims=["batch", 3], io=XY)
    backend = _loaded(tmp_path)
    dtype = DataType(name)
    assert backend.config.input[0].data_type == mc.DataType.Value(dtype.triton_name)
    x = sample(name)
    y = backend.infer({"x": x})["y"]
    assert y.dtype == dtype.numpy_dtype and y.shape == x.shape
    assert y.tobytes() == x.tobytes() if dtype is not DataType.BYTES else y.tolist() == x.tolist()


def test_execute_splits_rows_and_isolates_a_bad_request(onnx_dir: Path) -> None:
    backend = _loaded(onnx_dir)
    reqs = [{"x": mlp_rows(n, seed=n)} for n in (1, 3, 5)]
    for req, res in zip(reqs, backend.execute(reqs), strict=True):
        assert isinstance(res, dict)
        assert_like_eager(res["y"], req["x"])


def test_a_request_that_fails_at_run_time_fails_alone(tmp_path: Path) -> None:
    table = helper.make_tensor("table", TensorProto.FLOAT, [4, 2], np.arange(8, dtype=np.float32).tolist())
    gather = helper.make_node("Gather", ["table", "idx"], ["out"])
    idx, out = tensor("idx", TensorProto.INT64, ["batch"]), tensor("out", TensorProto.FLOAT, ["batch", 2])
    save_onnx(tmp_path / "model.onnx", [gather], [idx], [out], [table])
    backend = _loaded(tmp_path)
    assert backend.config.max_batch_size == 4 and list(backend.config.input[0].dims) == []
    good = [{"idx": np.array([0, 3])}, {"idx": np.array([1])}]
    bad = {"idx": np.array([2, 9])}  # index 9 is out of the table: ORT fails at run time
    results = backend.execute([good[0], bad, good[1]])
    assert isinstance(results[1], InternalError) and "model 'm'" in results[1].message
    assert isinstance(results[0], dict) and isinstance(results[2], dict)
    np.testing.assert_array_equal(results[0]["out"], [[0, 1], [6, 7]])
    np.testing.assert_array_equal(results[2]["out"], [[2, 3]])


def test_parameters_are_applied_and_checked(onnx_dir: Path) -> None:
    config = mc.ModelConfig(name="m")
    for key, value in {
        "intra_op_thread_count": "2",
        "inter_op_thread_count": "1",
        "graph_optimization_level": "basic",
        "allow_spinning": "0",
    }.items():
        config.parameters[key].string_value = value
    backend = _loaded(onnx_dir, config)
    assert backend.session is not None
    assert backend.session.get_session_options().intra_op_num_threads == 2
    assert backend.infer({"x": mlp_rows(2)})["y"].shape == (2, 8)
    config.parameters["graph_optimization_level"].string_value = "max"
    with pytest.raises(InvalidArgument, match=r"graph_optimization_level.*'max'"):
        OnnxRuntimeBackend(context(config, onnx_dir)).load()
    config.parameters["graph_optimization_level"].string_value = "all"
    config.parameters["execution_providers"].string_value = "NoSuchExecutionProvider"
    with pytest.raises(Unsupported, match="NoSuchExecutionProvider"):
        OnnxRuntimeBackend(context(config, onnx_dir)).load()


def test_gpu_instance_group_falls_back_to_cpu_here(onnx_dir: Path) -> None:
    config = mc.ModelConfig(name="m")
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_GPU)
    backend = _loaded(onnx_dir, config)
    assert backend.session is not None
    assert "CPUExecutionProvider" in backend.session.get_providers()


def test_missing_model_file_is_clear(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"no model file .*\['model.onnx'\]"):
        OnnxRuntimeBackend.autocomplete(mc.ModelConfig(name="m"), tmp_path)
