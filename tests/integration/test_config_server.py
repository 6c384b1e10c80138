"""Config fields on a real server: reshape with classification (Triton's densenet_onnx config, as its
image_client asks for it), model_warmup before ready, and --strict-model-config. tritonclient HTTP and gRPC."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from harness.repository import densenet_model, onnx_echo
from harness.servers import ServerProcess, running_server, server_fixture


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("configs")
    densenet_model(root)
    warm = onnx_echo(root, "warm", "FP32", [4])
    text = (warm / "config.pbtxt").read_text()
    (warm / "config.pbtxt").write_text(text + """
        model_warmup [ { name: "zeros" batch_size: 8 count: 3
                         inputs { key: "INPUT" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]
        """)
    bare = onnx_echo(root, "bare", "FP32", [4])
    (bare / "config.pbtxt").unlink()
    return root


config_server = server_fixture("repo", "configs")


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
