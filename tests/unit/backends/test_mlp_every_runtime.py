"""The one MLP on every runtime backend: the answer equals torch eager for any batch, and auto-complete
reads the model's own signature (names, types, dims, a batch dim)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness.backends import MLP_IN, MLP_OUT, assert_like_eager, loaded, mlp_rows
from servelab.backends.base import Backend
from servelab.backends.onnxruntime import OnnxRuntimeBackend
from servelab.backends.openvino import OpenVinoBackend
from servelab.backends.torch import TorchBackend
from servelab.protocol import model_config_pb2 as mc


def _torchscript_config() -> mc.ModelConfig:
    config = mc.ModelConfig(name="m", backend="pytorch", max_batch_size=32)
    config.input.add(name="INPUT__0", data_type=mc.TYPE_FP32, dims=[MLP_IN])
    return config


#: (backend, version folder fixture, config, input name, output name)
RUNTIMES: dict[str, tuple[type[Backend], str, Callable[[], mc.ModelConfig], str, str]] = {
    "onnxruntime": (OnnxRuntimeBackend, "onnx_dir", lambda: mc.ModelConfig(name="m", backend="onnxruntime"), "x", "y"),
    "openvino-ir": (OpenVinoBackend, "ir_dir", lambda: mc.ModelConfig(name="m", backend="openvino"), "x", "y"),
    "openvino-onnx": (
        OpenVinoBackend, "ir_dir",
        lambda: mc.ModelConfig(name="m", backend="openvino", default_model_filename="src/model.onnx"), "x", "y",
    ),
    "torchscript": (TorchBackend, "script_dir", _torchscript_config, "INPUT__0", "OUTPUT__0"),
    "torch_export": (TorchBackend, "program_dir", lambda: mc.ModelConfig(name="m", platform="torch_export"), "input", "OUTPUT__0"),
}  # fmt: skip


@pytest.mark.parametrize("batch", [1, 3, 32])
@pytest.mark.parametrize("runtime", list(RUNTIMES))
def test_answer_equals_torch_eager(request: pytest.FixtureRequest, runtime: str, batch: int) -> None:
    cls, folder, config, inp, out = RUNTIMES[runtime]
    backend = loaded(cls, request.getfixturevalue(folder), config())
    x = mlp_rows(batch)
    outputs = backend.infer({inp: x})
    assert list(outputs) == [out] and outputs[out].shape == (batch, MLP_OUT)
    assert_like_eager(outputs[out], x)


@pytest.mark.parametrize(
    ("cls", "folder", "inp", "out"),
    [
        (OnnxRuntimeBackend, "onnx_dir", "x", "y"),
        (OpenVinoBackend, "ir_dir", "x", "y"),
        (TorchBackend, "program_dir", "input", "OUTPUT__0"),
    ],
    ids=["onnxruntime", "openvino", "torch_export"],
)
def test_autocomplete_reads_the_signature(
    request: pytest.FixtureRequest, cls: type[Backend], folder: str, inp: str, out: str
) -> None:
    config = mc.ModelConfig(name="m")
    cls.autocomplete(config, request.getfixturevalue(folder))
    assert config.max_batch_size == 4
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [(inp, mc.TYPE_FP32, [MLP_IN])]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [(out, mc.TYPE_FP32, [MLP_OUT])]

