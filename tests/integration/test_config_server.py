"""Config fields on a real server: reshape with classification (Triton's densenet_onnx config, as its
image_client asks for it), model_warmup before ready, and --strict-model-config. tritonclient HTTP and gRPC."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from harness.models import save_onnx, tensor
from harness.repository import onnx_echo, write_config
from harness.servers import ServerProcess, running_server

F = TensorProto.FLOAT


def _densenet_like(repo: Path) -> None:
    """Triton's densenet_onnx config over a tiny graph: score of class i = i * mean(pixels) * 3."""
    d = repo / "densenet_onnx"
    w = helper.make_tensor("w", F, [3, 1000], np.tile(np.arange(1000, dtype=np.float32), 3).tolist())
    flat = helper.make_tensor("flat", TensorProto.INT64, [2], [1, 3])
    shape = helper.make_tensor("shape", TensorProto.INT64, [4], [1, 1000, 1, 1])
    nodes = [helper.make_node("GlobalAveragePool", ["data_0"], ["p"]), helper.make_node("Reshape", ["p", "flat"], ["f"]),
             helper.make_node("MatMul", ["f", "w"], ["m"]), helper.make_node("Reshape", ["m", "shape"], ["fc6_1"])]  # fmt: skip
    save_onnx(d / "1" / "model.onnx", nodes, [tensor("data_0", F, [1, 3, 224, 224])], [tensor("fc6_1", F, [1, 1000, 1, 1])], [w, flat, shape])
    write_config(d, """
        name: "densenet_onnx"
        platform: "onnxruntime_onnx"
        max_batch_size : 0
        input [ { name: "data_0" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 224, 224 ]
                  reshape { shape: [ 1, 3, 224, 224 ] } } ]
        output [ { name: "fc6_1" data_type: TYPE_FP32 dims: [ 1000 ] reshape { shape: [ 1, 1000, 1, 1 ] }
                   label_filename: "densenet_labels.txt" } ]
        """)
    (d / "densenet_labels.txt").write_text("\n".join(f"CLASS_{i}" for i in range(1000)) + "\n")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("configs")
    _densenet_like(root)
    warm = onnx_echo(root, "warm", "FP32", [4])
    text = (warm / "config.pbtxt").read_text()
    (warm / "config.pbtxt").write_text(text + """
        model_warmup [ { name: "zeros" batch_size: 8 count: 3
                         inputs { key: "INPUT" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]
        """)
    bare = onnx_echo(root, "bare", "FP32", [4])
    (bare / "config.pbtxt").unlink()
    return root


@pytest.fixture(scope="module")
def config_server(repo: Path, log_dir: Path) -> Iterator[ServerProcess]:
    with running_server(repo, log_dir, "configs") as server:
        yield server


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_densenet_reshape_and_classification(config_server: ServerProcess, protocol: str) -> None:
    module = grpcclient if protocol == "grpc" else httpclient
    client = module.InferenceServerClient(config_server.grpc_address if protocol == "grpc" else config_server.http_address)
    image = module.InferInput("data_0", [3, 224, 224], "FP32")
    image.set_data_from_numpy(np.full((3, 224, 224), 0.5, dtype=np.float32))
    scores = client.infer("densenet_onnx", [image]).as_numpy("fc6_1")
    assert scores.shape == (1000,) and scores[999] == pytest.approx(999 * 1.5)
    top = client.infer("densenet_onnx", [image], outputs=[module.InferRequestedOutput("fc6_1", class_count=3)])
    assert [e.decode() for e in top.as_numpy("fc6_1")] == [f"{999 * 1.5:f}:999:CLASS_999", f"{998 * 1.5:f}:998:CLASS_998",
                                                             f"{997 * 1.5:f}:997:CLASS_997"]  # fmt: skip


def test_warmup_ran_and_the_model_is_ready(config_server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(config_server.http_address)
    assert client.is_model_ready("warm")
    assert client.get_model_config("warm")["model_warmup"][0]["batch_size"] == 8
    stats = client.get_inference_statistics("warm")["model_stats"][0]
    assert stats["inference_count"] == 0  # warm-up runs on the instances directly, not counted as requests


def test_strict_model_config_serves_only_complete_configs(repo: Path, log_dir: Path) -> None:
    flags = ("--strict-model-config=true", "--model-control-mode", "explicit", "--load-model", "warm")
    with running_server(repo, log_dir, "strict", *flags) as server:
        client = httpclient.InferenceServerClient(server.http_address)
        assert client.is_model_ready("warm")
        with pytest.raises(InferenceServerException, match="no inputs in config.pbtxt and auto-complete is off"):
            client.load_model("bare")
        assert not client.is_model_ready("bare")
