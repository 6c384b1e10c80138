"""Builds the integration-test model repository (small models made here, nothing downloaded).

- ``simple``, ``mlp_onnx``, ``mlp_torchscript``, ``mlp_openvino``: from examples/build_repository.py.
- ``echo_<dtype>`` for every numeric OIP datatype (incl. FP16, BF16): ONNX Identity, INPUT -> OUTPUT,
  max_batch_size 8, dims [-1].
- ``echo_bytes``: BYTES echo through the Python backend.
- ``classify``: FP32 [4] identity (ONNX) with labels.txt, for the classification extension.
- ``slow``: Python backend that sleeps ``SLOW_S`` then echoes FP32 [1] (drain and in-flight tests).
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from types import ModuleType

import onnx
from onnx import TensorProto, helper

__all__ = ["CLASS_LABELS", "NUMERIC_DTYPES", "SLOW_S", "build_test_repository", "echo_name"]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "build_repository.py"
SLOW_S = 0.5
CLASS_LABELS = ["cat", "dog", "bird", "fish"]

#: OIP datatype -> ONNX element type
NUMERIC_DTYPES: dict[str, int] = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BF16": TensorProto.BFLOAT16,
}


def echo_name(datatype: str) -> str:
    return f"echo_{datatype.lower()}"


def _examples() -> ModuleType:
    spec = importlib.util.spec_from_file_location("servelab_examples_build_repository", EXAMPLES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _identity_onnx(path: Path, elem_type: int, dims: list[int | str]) -> None:
    x = helper.make_tensor_value_info("INPUT", elem_type, ["batch", *dims])
    y = helper.make_tensor_value_info("OUTPUT", elem_type, ["batch", *dims])
    graph = helper.make_graph([helper.make_node("Identity", ["INPUT"], ["OUTPUT"])], "echo", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)


def _config(name: str, backend: str, dtype: str, dims: str, extra: str = "") -> str:
    return textwrap.dedent(
        f"""\
        name: "{name}"
        {backend}
        max_batch_size: 8
        input [ {{ name: "INPUT", data_type: TYPE_{dtype}, dims: {dims} }} ]
        output [ {{ name: "OUTPUT", data_type: TYPE_{dtype}, dims: {dims} {extra} }} ]
        """
    )


def build_echo_models(repo: Path) -> None:
    for dtype, elem in NUMERIC_DTYPES.items():
        d = repo / echo_name(dtype)
        _identity_onnx(d / "1" / "model.onnx", elem, ["n"])
        (d / "config.pbtxt").write_text(_config(d.name, 'platform: "onnxruntime_onnx"', dtype, "[ -1 ]"))


ECHO_BYTES = '''\
class TritonPythonModel:
    def initialize(self, args):
        pass

    def execute(self, requests):
        return [{"OUTPUT": r.inputs["INPUT"]} for r in requests]

    def finalize(self):
        pass
'''

SLOW = f'''\
import time


class TritonPythonModel:
    def initialize(self, args):
        pass

    def execute(self, requests):
        time.sleep({SLOW_S})
        return [{{"OUTPUT": r.inputs["INPUT"]}} for r in requests]

    def finalize(self):
        pass
'''


def _python_model(repo: Path, name: str, source: str, dtype: str, dims: str) -> None:
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.py").write_text(source)
    (d / "config.pbtxt").write_text(_config(name, 'backend: "python"', dtype, dims))


def build_classify(repo: Path) -> None:
    d = repo / "classify"
    _identity_onnx(d / "1" / "model.onnx", TensorProto.FLOAT, [4])
    (d / "labels.txt").write_text("\n".join(CLASS_LABELS) + "\n")
    extra = ', label_filename: "labels.txt"'
    (d / "config.pbtxt").write_text(_config("classify", 'platform: "onnxruntime_onnx"', "FP32", "[ 4 ]", extra))


def build_test_repository(repo: Path) -> Path:
    """Write every test model under ``repo`` (which must not exist or be empty); returns ``repo``."""
    repo.mkdir(parents=True, exist_ok=True)
    examples = _examples()
    examples.build_simple(repo)
    examples.build_mlps(repo)
    build_echo_models(repo)
    build_classify(repo)
    _python_model(repo, "echo_bytes", ECHO_BYTES, "STRING", "[ -1 ]")
    _python_model(repo, "slow", SLOW, "FP32", "[ 1 ]")
    return repo
