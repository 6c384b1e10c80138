"""The Triton peer's layout and command line, the generated onnxruntime python model (run here through
servelab's triton_python_backend_utils), and the ``triton`` / ``servelab-python`` compare targets; nothing is started."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import pytest
from google.protobuf import json_format, text_format
from onnx import TensorProto, helper, numpy_helper

from servelab.backends.pb_utils import InferenceRequest, InferenceResponse, Tensor
from servelab.bench.compare import CompareSpec
from servelab.bench.peers.base import ModelArtefacts, TensorInfo
from servelab.bench.peers.family import find_family
from servelab.bench.peers.targets import parse_targets
from servelab.bench.peers.triton import (
    ONNX_RUNNER,
    PYTHON_AS_IS,
    TritonPeer,
    onnx_runner_config,
    write_onnx_runner,
)
from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2

W = np.arange(12, dtype=np.float32).reshape(4, 3)
ARTS = ModelArtefacts("lin", (TensorInfo("X", "FP32", (4,)),), (TensorInfo("Y", "FP32", (3,)),), max_batch_size=8)


def _onnx(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])], "lin",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["b", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["b", 3])], [numpy_helper.from_array(W, "W")],
    )  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def _config(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_the_generated_config_is_a_python_model_with_the_same_io() -> None:
    cfg = _config(onnx_runner_config(ARTS, instances=2, max_queue_delay_us=500, intra_op_threads=3))
    assert (cfg.name, cfg.backend, cfg.max_batch_size) == ("lin", "python", 8)
    assert [(t.name, list(t.dims)) for t in cfg.input] == [("X", [4])] and cfg.output[0].name == "Y"
    assert cfg.input[0].data_type == model_config_pb2.TYPE_FP32
    assert cfg.instance_group[0].count == 2 and cfg.dynamic_batching.max_queue_delay_microseconds == 500
    assert cfg.parameters["intra_op_threads"].string_value == "3"
    assert not _config(onnx_runner_config(ARTS)).HasField("dynamic_batching")


def _load_runner(folder: Path) -> object:
    spec = importlib.util.spec_from_file_location("runner_under_test", folder / "1" / "model.py")
    assert spec is not None and spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    cfg = json_format.MessageToJson(_config((folder / "config.pbtxt").read_text()), preserving_proto_field_name=True)
    model.initialize({"model_config": cfg, "model_repository": str(folder), "model_version": "1"})
    return model


def test_the_generated_model_batches_requests_and_fails_only_the_bad_one(tmp_path: Path) -> None:
    arts = ModelArtefacts(ARTS.name, ARTS.inputs, ARTS.outputs, 8, onnx=_onnx(tmp_path / "src" / "model.onnx"))
    write_onnx_runner(tmp_path / "lin", arts)
    model = _load_runner(tmp_path / "lin")
    a, b = np.ones((2, 4), np.float32), np.arange(12, dtype=np.float32).reshape(3, 4)
    requests = [InferenceRequest(inputs=[Tensor(n, x)]) for n, x in (("X", a), ("Z", a), ("X", b))]
    replies = model.execute(requests)  # type: ignore[attr-defined]
    assert [type(r) for r in replies] == [InferenceResponse] * 3
    np.testing.assert_allclose(replies[0].as_dict()["Y"], a @ W)
    np.testing.assert_allclose(replies[2].as_dict()["Y"], b @ W)
    assert replies[1].has_error() and "'X' is missing" in replies[1].error().message()


def test_prepare_copies_a_python_model_or_wraps_an_onnx_one(tmp_path: Path) -> None:
    src = tmp_path / "add"
    (src / "1").mkdir(parents=True)
    (src / "1" / "model.py").write_text("class TritonPythonModel: pass\n")
    (src / "config.pbtxt").write_text('name: "add"\nbackend: "python"\n')
    peer = TritonPeer(tmp_path / "peers", work_dir=tmp_path / "work")
    peer.prepare(ModelArtefacts("add", (), (), python_model=src))
    peer.prepare(ModelArtefacts("lin", ARTS.inputs, ARTS.outputs, onnx=_onnx(tmp_path / "m.onnx")))
    assert peer.models == ["add", "lin"] and peer.served_as == {"add": PYTHON_AS_IS, "lin": ONNX_RUNNER}
    assert (peer.repository / "add" / "1" / "model.py").is_file()
    assert (peer.repository / "lin" / "1" / "model.onnx").is_file()
    argv = peer.argv([1, 2, 3])
    assert argv[0].endswith("bin/tritonserver") and argv[argv.index("--model-control-mode") + 1] == "explicit"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--load-model"] == ["add", "lin"]
    assert all(argv[argv.index(f) + 1] == "127.0.0.1" for f in ("--http-address", "--grpc-address", "--metrics-address"))
    assert argv[argv.index("--backend-directory") + 1].endswith("pytriton/tritonserver/backends")


@pytest.mark.parametrize(
    ("config", "match"),
    [('name: "m"\nplatform: "onnxruntime_onnx"\n', "runs 'python'"), ('name: "other"\nbackend: "python"\n', "differs")],
)
def test_only_python_models_are_served_as_they_are(tmp_path: Path, config: str, match: str) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.pbtxt").write_text(config)
    with pytest.raises(InvalidArgument, match=match):
        TritonPeer(tmp_path).add_python_model(tmp_path / "m")
    with pytest.raises(InvalidArgument, match="neither a model.py nor a model.onnx"):
        TritonPeer(tmp_path).prepare(ARTS)
    with pytest.raises(InvalidArgument, match="protocol"):
        TritonPeer(tmp_path, protocol="tcp")


def test_a_family_knows_its_python_member(tmp_path: Path) -> None:
    for name, backend in (("add_python", 'backend: "python"'), ("add_onnx", 'platform: "onnxruntime_onnx"')):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "config.pbtxt").write_text(
            f'name: "{name}"\n{backend}\ninput [ {{ name: "A" data_type: TYPE_FP32 dims: [ 4 ] }} ]\n'
        )
    (tmp_path / "add_python" / "1" / "model.py").write_text("")
    _onnx(tmp_path / "add_onnx" / "1" / "model.onnx")
    family = find_family(tmp_path, "add")
    assert sorted(family.members) == ["onnxruntime", "python"]
    arts = family.artefacts("python")
    assert arts.python_model == (tmp_path / "add_python").resolve() and arts.onnx is not None
    assert arts.inputs == (TensorInfo("A", "FP32", (4,)),)


def test_triton_and_servelab_python_are_compare_targets() -> None:
    choices = parse_targets("servelab-python,triton,triton@grpc,servelab-python@grpc")
    assert [(c.name, c.protocol) for c in choices] == [
        ("servelab-python", "http"), ("triton", "http"), ("triton", "grpc"), ("servelab-python", "grpc"),
    ]  # fmt: skip
    with pytest.raises(InvalidArgument, match="unknown target"):
        parse_targets("tritonserver")


def test_compare_checks_its_client() -> None:
    targets = tuple(parse_targets("triton"))
    assert CompareSpec("m", Path("."), targets, client="perf_analyzer").client == "perf_analyzer"
    with pytest.raises(InvalidArgument, match="--client must be one of builtin, perf_analyzer"):
        CompareSpec("m", Path("."), targets, client="wrk")


def test_the_example_models_run_on_servelab_python_api() -> None:
    """add_sub and image_preprocess from examples/triton_models, imported the way servelab imports them."""
    root = Path(__file__).resolve().parents[3] / "examples" / "triton_models"
    for name in ("add_sub", "image_preprocess"):
        spec = importlib.util.spec_from_file_location(f"example_{name}", root / name / "1" / "model.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cfg = json_format.MessageToJson(_config((root / name / "config.pbtxt").read_text()), preserving_proto_field_name=True)
        model = module.TritonPythonModel()
        model.initialize({"model_config": cfg})
        if name == "add_sub":
            x, y = np.float32([1, 2, 3, 4]), np.float32([4, 3, 2, 1])
            out = model.execute([InferenceRequest(inputs=[Tensor("INPUT0", x), Tensor("INPUT1", y)])])[0].as_dict()
            assert out["OUTPUT0"].tolist() == [5, 5, 5, 5] and out["OUTPUT1"].tolist() == [-3, -1, 1, 3]
        else:
            image = np.full((64, 64, 3), 255, np.uint8)
            out = model.execute([InferenceRequest(inputs=[Tensor("IMAGE", image)])])[0].as_dict()
            assert out["PIXELS"].shape == (3, 64, 64) and out["PIXELS"].dtype == np.float32
            np.testing.assert_allclose(out["PIXELS"][:, 0, 0], (1 - np.array([0.485, 0.456, 0.406])) / [0.229, 0.224, 0.225], rtol=1e-5)
