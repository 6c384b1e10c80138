"""Every Open Inference Protocol datatype round-trips through the Engine (BYTES via the Python backend)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from engine_models import identity_onnx, write_config
from onnx import TensorProto

from servelab import Engine
from servelab.types import DataType

ONNX_TYPES = {
    DataType.BOOL: TensorProto.BOOL,
    DataType.UINT8: TensorProto.UINT8,
    DataType.UINT16: TensorProto.UINT16,
    DataType.UINT32: TensorProto.UINT32,
    DataType.UINT64: TensorProto.UINT64,
    DataType.INT8: TensorProto.INT8,
    DataType.INT16: TensorProto.INT16,
    DataType.INT32: TensorProto.INT32,
    DataType.INT64: TensorProto.INT64,
    DataType.FP16: TensorProto.FLOAT16,
    DataType.FP32: TensorProto.FLOAT,
    DataType.FP64: TensorProto.DOUBLE,
    DataType.BF16: TensorProto.BFLOAT16,
}

ECHO_PY = """\
class TritonPythonModel:
    def execute(self, requests):
        return [{"y": r.inputs["x"]} for r in requests]
"""


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    repo: Path = tmp_path_factory.mktemp("echo")
    for dt, elem in ONNX_TYPES.items():
        name = f"echo_{dt.value.lower()}"
        identity_onnx(repo / name / "1" / "model.onnx", elem, ("batch", 3))
    (repo / "echo_bytes" / "1").mkdir(parents=True)
    (repo / "echo_bytes" / "1" / "model.py").write_text(ECHO_PY)
    write_config(
        repo / "echo_bytes",
        'backend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "x", data_type: TYPE_STRING, dims: [3] } ]\n'
        'output [ { name: "y", data_type: TYPE_STRING, dims: [3] } ]\n',
    )
    eng = Engine(repo)
    yield eng
    eng.close()


def _sample(dt: DataType) -> np.ndarray:
    if dt is DataType.BOOL:
        return np.array([[True, False, True], [False, False, True]])
    if dt is DataType.BYTES:
        return np.array([[b"a", b"", b"\x00\xffbin"], [b"x" * 100, b"y", "é".encode()]], dtype=object)
    if dt is DataType.BF16:
        return np.array([[1.5, -2.0, 3.25], [0.0, 1e3, -7.0]], dtype=ml_dtypes.bfloat16)
    info = np.finfo(dt.numpy_dtype) if dt.numpy_dtype.kind == "f" else np.iinfo(dt.numpy_dtype)
    return np.array([[info.min, 0, info.max], [1, 2, 3]], dtype=dt.numpy_dtype)


@pytest.mark.parametrize("dt", list(DataType), ids=lambda d: d.value)
def test_round_trip(engine: Engine, dt: DataType) -> None:
    name = f"echo_{dt.value.lower()}"
    x = _sample(dt)
    out = engine.infer(name, {"x": x})["y"]
    assert out.dtype == x.dtype
    assert out.shape == x.shape
    assert out.tolist() == x.tolist()
    assert engine.get_model_metadata(name)["inputs"][0]["datatype"] == dt.value
