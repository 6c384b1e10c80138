"""TensorRT and TensorFlow backends: import without their libraries, clear errors, real runs where present."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.backends import context
from servelab.backends import backend_class
from servelab.backends.tensorflow import TensorFlowBackend
from servelab.backends.tensorrt import TensorRTBackend
from servelab.errors import Unsupported
from servelab.protocol import model_config_pb2 as mc


@pytest.mark.parametrize(
    ("cls", "library", "extra"),
    [
        (TensorRTBackend, "tensorrt", "servelab[tensorrt]"),
        (TensorFlowBackend, "tensorflow", "servelab[tensorflow]"),
    ],
)
def test_missing_library_names_the_pip_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cls: type, library: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, library, None)  # makes `import library` raise ImportError
    (tmp_path / cls.default_filename).mkdir()
    backend = cls(context(mc.ModelConfig(name="m"), tmp_path))
    with pytest.raises(Unsupported, match=re.escape(f"pip install '{extra}'")):
        backend.load()
    with pytest.raises(Unsupported, match=library):
        cls.autocomplete(mc.ModelConfig(name="m"), tmp_path)


def test_registry_imports_both_without_their_libraries() -> None:
    assert backend_class("tensorrt") is TensorRTBackend
    assert backend_class("tensorflow") is TensorFlowBackend
    assert TensorRTBackend.platforms == ("tensorrt_plan",) and TensorFlowBackend.platforms == (
        "tensorflow_savedmodel",
    )


def test_tensorflow_savedmodel_round_trip(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")

    class Affine(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def serve(self, x: object) -> dict[str, object]:
            return {
                "y": x * 2.0 + 1.0,
                "n": tf.reduce_sum(tf.ones_like(x, dtype=tf.int64), axis=1, keepdims=True),
            }

    module = Affine()
    tf.saved_model.save(
        module, str(tmp_path / "model.savedmodel"), signatures={"serving_default": module.serve}
    )
    config = mc.ModelConfig(name="m")
    TensorFlowBackend.autocomplete(config, tmp_path)
    assert config.max_batch_size == 4
    assert {(t.name, t.data_type, tuple(t.dims)) for t in config.output} == {
        ("y", mc.TYPE_FP32, (4,)),
        ("n", mc.TYPE_INT64, (1,)),
    }
    backend = TensorFlowBackend(context(config, tmp_path))
    backend.load()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = backend.infer({"x": x})
    np.testing.assert_array_equal(out["y"], x * 2 + 1)
    np.testing.assert_array_equal(out["n"], [[4], [4]])


def test_tensorrt_engine_round_trip(tmp_path: Path) -> None:
    trt = pytest.importorskip("tensorrt")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("TensorRT needs a CUDA GPU")
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    x = network.add_input("x", trt.float32, (-1, 4))
    network.mark_output(network.add_identity(x).get_output(0))
    network.get_output(0).name = "y"
    profile = builder.create_optimization_profile()
    profile.set_shape("x", (1, 4), (4, 4), (8, 4))
    build_config = builder.create_builder_config()
    build_config.add_optimization_profile(profile)
    (tmp_path / "model.plan").write_bytes(bytes(builder.build_serialized_network(network, build_config)))
    config = mc.ModelConfig(name="m")
    TensorRTBackend.autocomplete(config, tmp_path)
    assert config.max_batch_size == 4 and list(config.input[0].dims) == [4]
    backend = TensorRTBackend(context(config, tmp_path))
    backend.load()
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(backend.infer({"x": data})["y"], data)
