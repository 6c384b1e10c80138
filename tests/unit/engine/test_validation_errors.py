"""Every validation error names the tensor, what was expected and what came."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto

from harness.models import XY, unary_onnx
from harness.repository import scale_model, write_config
from servelab import Engine
from servelab.errors import InvalidArgument
from servelab.protocol.codecs import array_from_json, array_from_raw
from servelab.types import DataType, InferRequest, RequestedOutput, Tensor


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    repo = tmp_path_factory.mktemp("repo")
    scale_model(repo, "m", {1: 1.0})
    unary_onnx(repo / "nb" / "1" / "model.onnx", elem_type=TensorProto.FLOAT, dims=(2, -1), io=XY)
    write_config(repo / "nb", 'name: "nb"\nmax_batch_size: 0\ninput [ { name: "x", data_type: TYPE_FP32, dims: [2, -1] } ]\n')
    eng = Engine(repo)
    yield eng
    eng.close()


def _tensor(name: str, array: np.ndarray, datatype: DataType | None = None) -> Tensor:
    return Tensor.from_numpy(name, array, datatype)


OK = np.ones((2, 4), np.float32)


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ({"x": OK, "extra": OK}, r"unknown input \['extra'\]; expected inputs \['x'\]"),
        ({}, r"missing input \['x'\]"),
        ({"x": OK.astype(np.float64)}, "input 'x' has datatype FP64; expected FP32"),
        ({"x": OK.astype(np.int32)}, "input 'x' has datatype INT32; expected FP32"),
        ({"x": np.ones((2, 5), np.float32)}, r"input 'x' has shape \[2, 5\]; expected FP32 \[-1 \(batch\), 4\]"),
        ({"x": np.ones((2, 4, 1), np.float32)}, r"has shape \[2, 4, 1\]"),
        ({"x": np.ones((9, 4), np.float32)}, r"batch size 9; expected 1 to 8 \(max_batch_size\)"),
        ({"x": np.ones((0, 4), np.float32)}, r"batch size 0; expected 1 to 8"),
        ({"x": np.float32(1.0)}, r"has shape \[\]"),
        ({"x": np.array(["a"], dtype=object)}, "datatype BYTES; expected FP32"),
    ],
)
def test_engine_input_errors(engine: Engine, inputs: dict[str, np.ndarray], match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        engine.infer("m", inputs)


def test_unbatched_model_shapes(engine: Engine) -> None:
    out = engine.infer("nb", {"x": np.ones((2, 7), np.float32)})
    assert out["y"].shape == (2, 7)
    with pytest.raises(InvalidArgument, match=r"shape \[3, 7\]; expected FP32 \[2, -1\]"):
        engine.infer("nb", {"x": np.ones((3, 7), np.float32)})


def test_unknown_requested_output(engine: Engine) -> None:
    with pytest.raises(InvalidArgument, match="unknown requested output 'z'"):
        engine.infer("m", {"x": OK}, outputs=["z"])
    dp = engine.dataplane
    with pytest.raises(InvalidArgument, match="unknown requested output 'z'"):
        dp.infer(InferRequest("m", [_tensor("x", OK)], outputs=[RequestedOutput("z")]))


def test_wire_errors(engine: Engine) -> None:
    dp = engine.dataplane
    with pytest.raises(InvalidArgument, match="input 'x' appears twice"):
        dp.infer(InferRequest("m", [_tensor("x", OK), _tensor("x", OK)]))
    declared = Tensor("x", DataType.FP16, (2, 4), OK.astype(np.float16))
    with pytest.raises(InvalidArgument, match="datatype FP16; expected FP32"):
        dp.infer(InferRequest("m", [declared]))
    lying = Tensor("x", DataType.FP32, (2, -4), OK)
    with pytest.raises(InvalidArgument, match="shape"):
        dp.infer(InferRequest("m", [lying]))


def test_element_limit(tmp_path: Path) -> None:
    scale_model(tmp_path, "m", {1: 1.0})
    from servelab.config import ControlMode
    from servelab.core.dataplane import DataPlane
    from servelab.core.registry import ModelRegistry
    from servelab.repository import ModelRepository

    dp = DataPlane(ModelRegistry(ModelRepository(tmp_path), ControlMode.NONE, max_tensor_elements=16))
    dp.startup()
    try:
        with pytest.raises(InvalidArgument, match="32 elements; the limit is 16"):
            dp.infer_arrays("m", {"x": np.ones((8, 4), np.float32)})
        assert dp.infer_arrays("m", {"x": np.ones((4, 4), np.float32)})["y"].shape == (4, 4)
    finally:
        dp.close()


def test_codec_errors() -> None:
    with pytest.raises(InvalidArgument, match=r"tensor 'x': FP32 \[2, 2\] needs 16 bytes of data; got 12"):
        array_from_raw(b"\0" * 12, DataType.FP32, (2, 2), "x")
    with pytest.raises(InvalidArgument, match=r"shape \[2, 2\] needs 4 elements; data has 3"):
        array_from_json([1, 2, 3], DataType.INT32, (2, 2), "x")
    with pytest.raises(InvalidArgument, match="does not fit datatype INT32"):
        array_from_json(["a", "b"], DataType.INT32, (2,), "x")
    with pytest.raises(InvalidArgument, match="BYTES element 0 claims 100 bytes"):
        array_from_raw(b"\x64\0\0\0abc", DataType.BYTES, (1,), "x")
    with pytest.raises(InvalidArgument, match="bytes left over"):
        array_from_raw(b"\x01\0\0\0ab", DataType.BYTES, (1,), "x")
    with pytest.raises(InvalidArgument, match="non-negative integers"):
        array_from_json([1], DataType.INT32, (-1,), "x")


def test_failures_are_counted(engine: Engine) -> None:
    before = engine.get_inference_statistics("m")["model_stats"][0]["inference_stats"]["fail"]["count"]
    with pytest.raises(InvalidArgument):
        engine.infer("m", {"x": OK.astype(np.float64)})
    after = engine.get_inference_statistics("m")["model_stats"][0]["inference_stats"]["fail"]["count"]
    assert after == before + 1
