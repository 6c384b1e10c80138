"""OpenVinoBackend: auto-complete checks, dynamic batch, BF16, threads (parity with torch eager, IR and
ONNX: test_mlp_every_runtime)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from harness.backends import assert_like_eager, loaded, mlp_rows
from harness.models import DTYPES, XY, unary_onnx
from servelab.backends.openvino import OpenVinoBackend
from servelab.errors import InvalidArgument, Unsupported
from servelab.protocol import model_config_pb2 as mc


def _loaded(version_dir: Path, config: mc.ModelConfig | None = None) -> OpenVinoBackend:
    return loaded(OpenVinoBackend, version_dir, config or mc.ModelConfig(name="m", backend="openvino"))


def test_autocomplete_checks_what_the_user_wrote(ir_dir: Path) -> None:
    bad = mc.ModelConfig(name="m")
    bad.output.add(name="y", data_type=mc.TYPE_INT32, dims=[8])
    with pytest.raises(
        InvalidArgument, match="output 'y': config data_type TYPE_INT32 but the model has TYPE_FP32"
    ):
        OpenVinoBackend.autocomplete(bad, ir_dir)


def test_fixed_batch_model_is_made_dynamic(tmp_path: Path) -> None:
    unary_onnx(tmp_path / "model.onnx", dims=[1, 3], io=XY)
    config = mc.ModelConfig(name="m", max_batch_size=8)
    backend = _loaded(tmp_path, config)
    assert list(config.input[0].dims) == [3]
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    np.testing.assert_array_equal(backend.infer({"x": x})["y"], x)


def test_bf16_echo(tmp_path: Path) -> None:
    unary_onnx(tmp_path / "model.onnx", elem_type=DTYPES["BF16"], dims=["b", 3], io=XY)
    backend = _loaded(tmp_path)
    x = np.array([[1.5, -2.25, 3e8], [0.0078125, 7, 9]], dtype=ml_dtypes.bfloat16)
    y = backend.infer({"x": x})["y"]
    assert y.dtype == ml_dtypes.bfloat16 and y.tobytes() == x.tobytes()


def test_bytes_and_bad_parameters_are_refused(tmp_path: Path, ir_dir: Path) -> None:
    unary_onnx(tmp_path / "model.onnx", elem_type=DTYPES["BYTES"], dims=["b", 3], io=XY)
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
    xs = [mlp_rows(n, seed=n) for n in range(1, 9)]
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda x: backend.infer({"x": x})["y"], xs))
    for x, y in zip(xs, outs, strict=True):
        assert_like_eager(y, x)


def test_execute_three_requests(ir_dir: Path) -> None:
    backend = _loaded(ir_dir)
    reqs = [{"x": mlp_rows(n, seed=n)} for n in (3, 1, 2)]
    for req, res in zip(reqs, backend.execute(reqs), strict=True):
        assert isinstance(res, dict) and res["y"].shape == (len(req["x"]), 8)
        assert_like_eager(res["y"], req["x"])
