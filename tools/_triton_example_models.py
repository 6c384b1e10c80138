"""The model repository Triton's Python client examples expect, for servelab and for the real Triton here.

From Triton's server repository (read at run time, never committed): ``docs/examples/model_repository``'s
configs, labels and ONNX files (``simple``, ``simple_int8``, ``simple_string``, ``simple_sequence``,
``simple_dyna_sequence``, the python model ``simple_identity``). Built here, to the specs those configs
and Triton's qa describe, because their files are downloads (``densenet_onnx``, ``inception_onnx``: small
ONNX classifiers with the same tensors, reshape and labels) or custom backends (``custom_identity_int32``:
an ONNX Identity; ``repeat_int32``: a decoupled python model doing what the repeat backend does), plus
``preprocess_inception_ensemble`` (a python decoder of binary PPM images and a batched classifier).

Triton here has only the python backend: an ONNX model is served there through a python model that runs
its ONNX file with onnxruntime (``tools/_triton_onnx_runner.py``: like the one ``servelab compare``
generates, plus control inputs and strings), with the docs' config turned to ``backend: "python"``;
:data:`TRITON_AS` names how each model is served there.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
from google.protobuf import text_format
from onnx import TensorProto, helper, numpy_helper

from servelab.protocol import model_config_pb2 as mc

__all__ = ["DOCS_MODELS", "MODEL_CONTROL_SET", "TRITON_AS", "build_repository", "triton_repository", "write_ppm"]

DOCS = "docs/examples/model_repository"
DOCS_MODELS = ("simple", "simple_int8", "simple_string", "simple_sequence", "simple_dyna_sequence", "simple_identity")
#: the eight models of the model-control examples' repository ("There are eight models ...")
MODEL_CONTROL_SET = ("simple", "simple_int8", "simple_string", "simple_identity", "custom_identity_int32",
                     "densenet_onnx", "inception_onnx", "repeat_int32")  # fmt: skip
TRITON_AS: dict[str, str] = {}
_RUNNER = Path(__file__).with_name("_triton_onnx_runner.py")
_RNG = np.random.default_rng(0)

_REPEAT_PY = '''"""Triton's repeat backend as a decoupled python model: one response per element of IN (after DELAY[i] ms),
each with OUT = [IN[i]] and IDX = [i]; then WAIT ms and the final flag."""
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()
            for i, value in enumerate(values):
                time.sleep(float(delays[i]) / 1000.0)
                out = pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))
                idx = pb_utils.Tensor("IDX", np.array([i], dtype=np.uint32))
                sender.send(pb_utils.InferenceResponse([out, idx]))
            time.sleep(float(wait[0]) / 1000.0)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''
_REPEAT_CONFIG = '''name: "repeat_int32"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
        { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
        { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]
'''
_PREPROCESS_PY = '''"""Decode binary PPM (P6) images to FP32 [299, 299, 3] in [-1, 1] (inception's scaling), numpy only."""
import numpy as np
import triton_python_backend_utils as pb_utils


def _decode(raw):
    parts, pos = [], 0
    while len(parts) < 4:
        while raw[pos:pos + 1].isspace():
            pos += 1
        end = pos
        while not raw[end:end + 1].isspace():
            end += 1
        parts.append(raw[pos:end])
        pos = end
    if parts[0] != b"P6" or parts[3] != b"255":
        raise ValueError("expected a binary PPM (P6, maxval 255) image")
    width, height = int(parts[1]), int(parts[2])
    pixels = np.frombuffer(raw, dtype=np.uint8, count=width * height * 3, offset=pos + 1).reshape(height, width, 3)
    rows = np.arange(299) * height // 299
    cols = np.arange(299) * width // 299
    return pixels[rows][:, cols].astype(np.float32) / 127.5 - 1.0


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            images = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            out = np.stack([_decode(bytes(item)) for item in images.reshape(-1)])
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", out)]))
        return responses
'''


def _docs_text(server_repo: Path, path: str) -> bytes:
    return subprocess.run(["git", "-C", str(server_repo), "show", f"HEAD:{path}"], capture_output=True,
                          check=True).stdout  # fmt: skip


def _classifier_onnx(path: Path, name_in: str, shape_in: list[int], name_out: str, classes: int,
                     shape_out: list[int], channel_axis: int) -> None:  # fmt: skip
    """Mean colour per channel -> a seeded linear layer -> softmax: an image classifier with real tensors."""
    axes = [a for a in range(1, len(shape_in)) if a != channel_axis]
    weights = numpy_helper.from_array(_RNG.standard_normal((3, classes)).astype(np.float32) * 4, "W")
    target = numpy_helper.from_array(np.array(shape_out, dtype=np.int64), "target")
    nodes = [
        helper.make_node("ReduceMean", [name_in, "axes"], ["mean"], keepdims=0),
        helper.make_node("MatMul", ["mean", "W"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=-1),
        helper.make_node("Reshape", ["prob", "target"], [name_out]),
    ]
    axes_init = numpy_helper.from_array(np.array(axes, dtype=np.int64), "axes")
    graph = helper.make_graph(
        nodes, "classifier", [helper.make_tensor_value_info(name_in, TensorProto.FLOAT, shape_in)],
        [helper.make_tensor_value_info(name_out, TensorProto.FLOAT, ["batch" if d == -1 else d for d in shape_out])],
        [weights, target, axes_init],
    )  # fmt: skip
    _save(path, graph)


def _save(path: Path, graph: onnx.GraphProto) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def _identity_onnx(path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], "identity",
        [helper.make_tensor_value_info("INPUT0", TensorProto.INT32, ["batch", "n"])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.INT32, ["batch", "n"])],
    )  # fmt: skip
    _save(path, graph)


def _image_models(repo: Path, server_repo: Path) -> None:
    for name, labels in (("densenet_onnx", "densenet_labels.txt"), ("inception_onnx", "inception_labels.txt")):
        folder = repo / name
        folder.mkdir(parents=True)
        (folder / "config.pbtxt").write_bytes(_docs_text(server_repo, f"{DOCS}/{name}/config.pbtxt"))
        (folder / labels).write_bytes(_docs_text(server_repo, f"{DOCS}/{name}/{labels}"))
    _classifier_onnx(repo / "densenet_onnx/1/model.onnx", "data_0", [1, 3, 224, 224], "fc6_1", 1000, [1, 1000, 1, 1], 1)
    _classifier_onnx(repo / "inception_onnx/1/model.onnx", "input:0", [1, 299, 299, 3],
                     "InceptionV3/Predictions/Softmax:0", 1001, [1, 1001], 3)  # fmt: skip


def _ensemble(repo: Path, server_repo: Path) -> None:
    pre = repo / "image_preprocess_ppm"
    (pre / "1").mkdir(parents=True)
    (pre / "1" / "model.py").write_text(_PREPROCESS_PY)
    (pre / "config.pbtxt").write_text(
        'name: "image_preprocess_ppm"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 299, 299, 3 ] } ]\n')  # fmt: skip
    cls = repo / "inception_batched"
    _classifier_onnx(cls / "1" / "model.onnx", "INPUT", ["batch", 299, 299, 3], "OUTPUT", 1001, [-1, 1001], 3)
    (cls / "config.pbtxt").write_text(
        'name: "inception_batched"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 299, 299, 3 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1001 ] } ]\n')  # fmt: skip
    ens = repo / "preprocess_inception_ensemble"
    (ens / "1").mkdir(parents=True)
    (ens / "inception_labels.txt").write_bytes(_docs_text(server_repo, f"{DOCS}/inception_onnx/inception_labels.txt"))
    (ens / "config.pbtxt").write_text(
        'name: "preprocess_inception_ensemble"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1001 ] label_filename: "inception_labels.txt" } ]\n'
        'ensemble_scheduling { step [\n'
        '  { model_name: "image_preprocess_ppm" model_version: -1 input_map { key: "INPUT" value: "INPUT" }\n'
        '    output_map { key: "OUTPUT" value: "pixels" } },\n'
        '  { model_name: "inception_batched" model_version: -1 input_map { key: "INPUT" value: "pixels" }\n'
        '    output_map { key: "OUTPUT" value: "OUTPUT" } } ] }\n')  # fmt: skip


def build_repository(repo: Path, server_repo: Path) -> Path:
    """Every model the examples name, as servelab serves them (ONNX models on onnxruntime)."""
    for name in DOCS_MODELS:
        folder = repo / name
        (folder / "1").mkdir(parents=True)
        (folder / "config.pbtxt").write_bytes(_docs_text(server_repo, f"{DOCS}/{name}/config.pbtxt"))
        file = "model.py" if name == "simple_identity" else "model.onnx"
        (folder / "1" / file).write_bytes(_docs_text(server_repo, f"{DOCS}/{name}/1/{file}"))
    _image_models(repo, server_repo)
    ident = repo / "custom_identity_int32"
    _identity_onnx(ident / "1" / "model.onnx")
    (ident / "config.pbtxt").write_text(
        'name: "custom_identity_int32"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]\n')  # fmt: skip
    (repo / "repeat_int32" / "1").mkdir(parents=True)
    (repo / "repeat_int32" / "1" / "model.py").write_text(_REPEAT_PY)
    (repo / "repeat_int32" / "config.pbtxt").write_text(_REPEAT_CONFIG)
    _ensemble(repo, server_repo)
    return repo


def triton_repository(source: Path, out: Path, names: tuple[str, ...] | None = None) -> Path:
    """The same models for Triton's python backend: python models as they are, ONNX ones through the
    generated onnxruntime model.py with their config turned to ``backend: "python"`` (labelled in TRITON_AS)."""
    for folder in sorted(p for p in source.iterdir() if p.is_dir() and (names is None or p.name in names)):
        config = text_format.Parse((folder / "config.pbtxt").read_text(), mc.ModelConfig())
        target = out / folder.name
        shutil.copytree(folder, target)
        if config.platform != "onnxruntime_onnx":
            TRITON_AS[folder.name] = "as is" if config.backend == "python" else config.platform
            continue
        config.ClearField("platform")
        config.backend = "python"
        for version in (p for p in target.iterdir() if p.is_dir()):
            shutil.copy(_RUNNER, version / "model.py")
            (version / "model.onnx").rename(version / "runner.onnx")
        (target / "config.pbtxt").write_text(text_format.MessageToString(config))
        TRITON_AS[folder.name] = "python model running its ONNX file on onnxruntime"
    return out


def write_ppm(path: Path, width: int = 320, height: int = 240) -> Path:
    """A seeded colour image as binary PPM: PIL reads it (image_client), the ensemble decodes it with numpy."""
    pixels = _RNG.integers(0, 256, (height, width, 3), dtype=np.uint8)
    path.write_bytes(f"P6\n{width} {height}\n255\n".encode() + pixels.tobytes())
    return path
