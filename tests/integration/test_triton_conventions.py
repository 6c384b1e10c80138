"""Conventions Triton's clients check, on a real server: the extensions the server metadata lists, the
trace and logging routes, Triton's error texts (``Request for unknown model``, ``failed to load``, the
explicit-content errors) and
``--model-repository`` (Triton's flag, repeatable).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from harness.clients import infer_input
from harness.repository import onnx_echo
from harness.servers import ServerProcess, running_server
from servelab.protocol import grpc_service_pb2 as pb

PROTOCOLS = {"http": (httpclient, "http_address"), "grpc": (grpcclient, "grpc_address")}
A = np.arange(16, dtype=np.int32).reshape(1, 16)


@pytest.fixture(params=sorted(PROTOCOLS))
def client(request: pytest.FixtureRequest, server: ServerProcess) -> Iterator[tuple[ModuleType, Any]]:
    module, address = PROTOCOLS[request.param]
    with module.InferenceServerClient(getattr(server, address)) as c:
        yield module, c


@pytest.fixture(params=sorted(PROTOCOLS))
def explicit(request: pytest.FixtureRequest, explicit_server: ServerProcess) -> Iterator[tuple[ModuleType, Any]]:
    module, address = PROTOCOLS[request.param]
    with module.InferenceServerClient(getattr(explicit_server, address)) as c:
        yield module, c


def test_server_metadata_lists_only_what_is_implemented(client: tuple[ModuleType, Any]) -> None:
    module, c = client
    meta = c.get_server_metadata(**({"as_json": True} if module is grpcclient else {}))
    extensions = set(meta["extensions"])
    assert {"system_shared_memory", "logging", "binary_tensor_data", "statistics", "model_repository"} <= extensions
    assert not extensions & {"cuda_shared_memory", "trace"}


def test_trace_settings_are_off_and_cannot_be_turned_on(client: tuple[ModuleType, Any]) -> None:
    module, c = client
    kwargs = {"as_json": True} if module is grpcclient else {}
    settings = c.get_trace_settings(**kwargs)
    level = settings["settings"]["trace_level"]["value"] if module is grpcclient else settings["trace_level"]
    assert level == ["OFF"]
    c.get_trace_settings(model_name="simple", **kwargs)
    with pytest.raises(InferenceServerException, match="tracing is not supported by this server"):
        c.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
    c.update_trace_settings(settings={"trace_level": ["OFF"]})
    with pytest.raises(InferenceServerException, match="Request for unknown model: 'nope' is not found"):
        c.get_trace_settings(model_name="nope", **kwargs)


def test_log_settings_change_the_server_log_level(client: tuple[ModuleType, Any], server: ServerProcess) -> None:
    module, c = client

    def verbose(settings: dict[str, Any]) -> int:
        if module is grpcclient:
            return int(settings["settings"]["log_verbose_level"]["uint32_param"])
        return int(settings["log_verbose_level"])

    kwargs = {"as_json": True} if module is grpcclient else {}
    assert verbose(c.get_log_settings(**kwargs)) == 0
    try:
        assert verbose(c.update_log_settings({"log_verbose_level": 1}, **kwargs)) == 1
        assert verbose(c.get_log_settings(**kwargs)) == 1
        with httpx.Client(base_url=server.http_url) as http:  # both ports see the one process-wide level
            assert http.get("/v2/logging").json()["log_verbose_level"] == 1
        with pytest.raises(InferenceServerException, match="log_file cannot be changed"):
            c.update_log_settings({"log_file": "/tmp/x.log"})
    finally:
        c.update_log_settings({"log_verbose_level": 0, "log_info": True})
    assert verbose(c.get_log_settings(**kwargs)) == 0


def _message(call: Any, *args: Any, **kwargs: Any) -> str:
    """The message of the InferenceServerException ``call`` raises (what tools match on)."""
    with pytest.raises(InferenceServerException) as info:
        call(*args, **kwargs)
    return str(info.value.message())


def test_triton_texts_for_unknown_models(client: tuple[ModuleType, Any]) -> None:
    module, c = client
    assert _message(c.get_model_metadata, "nope").startswith("Request for unknown model: 'nope' is not found")
    assert _message(c.infer, "nope", [infer_input(module, "INPUT0", A)]).startswith(
        "Request for unknown model: 'nope' is not found")  # fmt: skip
    assert _message(c.get_model_metadata, "simple", "7").startswith(
        "Request for unknown model: 'simple' version 7 is not found")  # fmt: skip


def test_failed_loads_say_failed_to_load(explicit: tuple[ModuleType, Any]) -> None:
    _, c = explicit
    message = _message(c.load_model, "wrong_model_name")
    assert message.startswith("failed to load 'wrong_model_name', ") and "not in the model repository" in message
    bad = '"parameters": {"config": {{"max_batch_size": "16"}}}'  # Triton's model-control example sends this
    message = _message(c.load_model, "simple", config=bad)
    assert message.startswith("failed to load 'simple', ") and "not a valid ModelConfig JSON" in message
    assert c.is_model_ready("simple")


class _FlagRepositories(ServerProcess):
    """A server given its repositories with ``--model-repository`` only (no positional folder)."""

    def __init__(self, repositories: list[Path], log_path: Path) -> None:
        super().__init__(repositories[0], log_path)
        self.repositories = repositories

    def target_args(self) -> list[str]:
        return [arg for r in self.repositories for arg in ("--model-repository", str(r))]


def test_model_repository_flag_is_repeatable(tmp_path: Path, test_repository: Path) -> None:
    extra = tmp_path / "second"
    onnx_echo(extra, "second_echo", "INT32", [-1])
    server = _FlagRepositories([test_repository, extra], tmp_path / "flags.log").start()
    try:
        with httpclient.InferenceServerClient(server.http_address) as c:
            assert c.is_model_ready("simple") and c.is_model_ready("second_echo")
    finally:
        assert server.stop() == 0, server.log_tail()


def test_model_repository_flag_adds_to_the_positional_folder(tmp_path: Path, log_dir: Path, test_repository: Path) -> None:
    extra = tmp_path / "more"
    onnx_echo(extra, "more_echo", "INT32", [-1])
    with running_server(test_repository, log_dir, "flag-and-folder", "--model-repository", str(extra)) as server, \
            httpclient.InferenceServerClient(server.http_address) as c:  # fmt: skip
        names = {row["name"] for row in c.get_model_repository_index()}
        assert {"simple", "more_echo"} <= names and c.is_model_ready("more_echo")


def _explicit_request(fill: Any) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
    fill(request)
    return request


def _both_forms(r: pb.ModelInferRequest) -> None:
    r.inputs[0].contents.int_contents.extend(range(16))
    r.raw_input_contents.extend([A.tobytes(), A.tobytes()])


EXPLICIT_CASES = {
    "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'": _both_forms,
    "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type 'FP32', expected datatype "
    "'INT32'": lambda r: [i.contents.fp32_contents.extend([1.0] * 16) for i in r.inputs],
    "unable to find data for input tensor 'INPUT1' for model 'simple' in request":
        lambda r: r.inputs[0].contents.int_contents.extend(range(16)),
    "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60":
        lambda r: r.raw_input_contents.extend([A.tobytes()[:60], A.tobytes()]),
}  # fmt: skip


@pytest.mark.parametrize("expected", sorted(EXPLICIT_CASES))
def test_explicit_content_errors_start_with_triton_texts(grpc_stub: Any, expected: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        grpc_stub.ModelInfer(_explicit_request(EXPLICIT_CASES[expected]), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith(expected), info.value.details()


def test_a_rest_input_without_data_gets_triton_text(server: ServerProcess) -> None:
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32"}]}
    answer = httpx.post(f"{server.http_url}/v2/models/simple/infer", json=body, timeout=10)
    assert answer.status_code == 400
    assert answer.json()["error"].startswith(
        "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
        "'shared_memory_region' in 'parameters'. But no field is set")  # fmt: skip
