"""OpenVinoBackend: IR and ONNX parity with torch eager, auto-complete, dynamic batch, BF16, threads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
from backends_testutil import ONNX_TYPES, ctx, eager, identity_onnx, mlp, rows

from servelab.backends.openvino import OpenVinoBackend
from servelab.convert.export import export_onnx, export_openvino
from servelab.errors import InvalidArgument, Unsupported
from servelab.protocol import model_config_pb2 as mc


@pytest.fixture(scope="module")
def ir_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    version_dir = tmp_path_factory.mktemp("ov") / "1"
    onnx_path = export_onnx(mlp(), torch.zeros(2, 16), version_dir / "src" / "model.onnx", ["x"], ["y"])
    export_openvino(onnx_path, version_dir / "model.xml")
    return version_dir


def _loaded(version_dir: Path, config: mc.ModelConfig | None = None) -> OpenVinoBackend:
    config = config or mc.ModelConfig(name="m", backend="openvino")
    OpenVinoBackend.autocomplete(config, version_dir)
    backend = OpenVinoBackend(ctx(version_dir, config))
    backend.load()
    return backend


@pytest.mark.parametrize("batch", [1, 32])
def test_ir_matches_torch_eager(ir_dir: Path, batch: int) -> None:
    backend = _loaded(ir_dir)
    x = rows(batch)
    out = backend.infer({"x": x})
    assert list(out) == ["y"]
    np.testing.assert_allclose(out["y"], eager(mlp(), x), atol=1e-5, rtol=0)


def test_onnx_file_with_openvino_backend(ir_dir: Path) -> None:
    config = mc.ModelConfig(name="m", backend="openvino", default_model_filename="src/model.onnx")
    backend = _loaded(ir_dir, config)
    x = rows(3)
    np.testing.assert_allclose(backend.infer({"x": x})["y"], eager(mlp(), x), atol=1e-5, rtol=0)


def test_autocomplete_from_ir(ir_dir: Path) -> None:
    config = mc.ModelConfig(name="m")
    OpenVinoBackend.autocomplete(config, ir_dir)
    assert config.max_batch_size == 4
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [("x", mc.TYPE_FP32, [16])]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [("y", mc.TYPE_FP32, [8])]
    bad = mc.ModelConfig(name="m")
    bad.output.add(name="y", data_type=mc.TYPE_INT32, dims=[8])
    with pytest.raises(
        InvalidArgument, match="output 'y': config data_type TYPE_INT32 but the model has TYPE_FP32"
    ):
        OpenVinoBackend.autocomplete(bad, ir_dir)


def test_fixed_batch_model_is_made_dynamic(tmp_path: Path) -> None:
    identity_onnx(tmp_path / "model.onnx", ONNX_TYPES["FP32"], [1, 3])
    config = mc.ModelConfig(name="m", max_batch_size=8)
    backend = _loaded(tmp_path, config)
    assert list(config.input[0].dims) == [3]
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    np.testing.assert_array_equal(backend.infer({"x": x})["y"], x)


def test_bf16_echo(tmp_path: Path) -> None:
    identity_onnx(tmp_path / "model.onnx", ONNX_TYPES["BF16"], ["b", 3])
    backend = _loaded(tmp_path)
    x = np.array([[1.5, -2.25, 3e8], [0.0078125, 7, 9]], dtype=ml_dtypes.bfloat16)
    y = backend.infer({"x": x})["y"]
    assert y.dtype == ml_dtypes.bfloat16 and y.tobytes() == x.tobytes()


def test_bytes_and_bad_parameters_are_refused(tmp_path: Path, ir_dir: Path) -> None:
    identity_onnx(tmp_path / "model.onnx", ONNX_TYPES["BYTES"], ["b", 3])
    with pytest.raises(Unsupported, match="BYTES"):
        _loaded(tmp_path)
    config = mc.ModelConfig(name="m")
    config.parameters["PERFORMANCE_HINT"].string_value = "FAST"
    with pytest.raises(InvalidArgument, match=r"PERFORMANCE_HINT.*'FAST'"):
        _loaded(ir_dir, config)


def test_parallel_callers_each_get_their_rows(ir_dir: Path) -> None:
    config = mc.ModelConfig(name="m")
    config.parameters["PERFORMANCE_HINT"].string_value = "THROUGHPUT"
    config.parameters["NUM_STREAMS"].string_value = "2"
    backend = _loaded(ir_dir, config)
    xs = [rows(n, seed=n) for n in range(1, 9)]
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda x: backend.infer({"x": x})["y"], xs))
    for x, y in zip(xs, outs, strict=True):
        np.testing.assert_allclose(y, eager(mlp(), x), atol=1e-5, rtol=0)


def test_execute_three_requests(ir_dir: Path) -> None:
    backend = _loaded(ir_dir)
    reqs = [{"x": rows(n, seed=n)} for n in (3, 1, 2)]
    for req, res in zip(reqs, backend.execute(reqs), strict=True):
        assert isinstance(res, dict) and res["y"].shape == (len(req["x"]), 8)
        np.testing.assert_allclose(res["y"], eager(mlp(), req["x"]), atol=1e-5, rtol=0)
