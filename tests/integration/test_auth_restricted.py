"""Triton's --http-restricted-api / --grpc-restricted-protocol on a real server, driven by tritonclient: a
restricted group without its header gets Triton's answer (HTTP 403, gRPC UNAVAILABLE, Triton's message);
with it, the call works; unrestricted groups stay open; bad flags stop the server with exit 2."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from harness.servers import ServerProcess, running_server

ADMIN = {"admin-key": "admin-value"}
INFER = {"infer-key": "infer-value"}
GRPC_ADMIN = {"triton-grpc-protocol-admin-key": "admin-value"}
GRPC_INFER = {"triton-grpc-protocol-infer-key": "infer-value"}


@pytest.fixture(scope="module")
def restricted(test_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    flags = [
        "--model-control-mode", "explicit", "--load-model", "simple",
        "--http-restricted-api", "model-repository,statistics,model-config:admin-key=admin-value",
        "--http-restricted-api=inference:infer-key=infer-value",
        "--grpc-restricted-protocol", "model-repository,statistics,model-config:admin-key=admin-value",
        "--grpc-restricted-protocol=inference:infer-key=infer-value",
    ]
    with running_server(test_repository, tmp_path_factory.mktemp("logs"), "restricted", *flags) as s:
        yield s


def _inputs(module):  # type: ignore[no-untyped-def]
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
    for i in inputs:
        i.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
    return inputs


def test_http_restricted_groups_answer_403_with_tritons_message(restricted: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(restricted.http_address)
    try:
        assert client.is_server_live() and client.is_model_ready("simple")
        assert client.get_model_metadata("simple")["name"] == "simple"  # metadata: not restricted
        for call, header in (
            (lambda **kw: client.get_model_repository_index(**kw), ADMIN),
            (lambda **kw: client.get_model_config("simple", **kw), ADMIN),
            (lambda **kw: client.get_inference_statistics("simple", **kw), ADMIN),
            (lambda **kw: client.infer("simple", _inputs(httpclient), **kw), INFER),
        ):
            with pytest.raises(InferenceServerException) as info:
                call()
            assert info.value.status() == "403"
            assert info.value.message() == f"This API is restricted, expecting header '{next(iter(header))}'"
            with pytest.raises(InferenceServerException, match="restricted"):
                call(headers={next(iter(header)): "wrong-value"})
            call(headers=dict(header))  # a copy: tritonclient.http adds its own headers to the dict
        client.load_model("echo_int8", headers=dict(ADMIN))
        client.unload_model("echo_int8", headers=dict(ADMIN))
        with pytest.raises(InferenceServerException, match="expecting header 'admin-key'"):
            client.load_model("echo_int8", headers=dict(INFER))
    finally:
        client.close()


def test_http_restricted_inference_covers_tfserving_and_torchserve(restricted: ServerProcess) -> None:
    body = {"instances": [{"INPUT0": list(range(16)), "INPUT1": [1] * 16}]}
    with httpx.Client(base_url=restricted.http_url, timeout=30) as http:
        refused = http.post("/v1/models/simple:predict", json=body)
        assert refused.status_code == 403 and refused.json() == {"error": "This API is restricted, expecting header 'infer-key'"}
        assert http.post("/v1/models/simple:predict", json=body, headers=INFER).status_code == 200
        assert http.post("/predictions/simple", json={"INPUT0": [0] * 16, "INPUT1": [0] * 16}).status_code == 403
        assert http.get("/v2/health/ready").status_code == 200
    with httpx.Client(base_url=restricted.management_url, timeout=30) as management:
        refused = management.get("/models")
        assert refused.status_code == 403 and "expecting header 'admin-key'" in refused.json()["message"]
        assert management.get("/models", headers=ADMIN).status_code == 200


def test_grpc_restricted_protocols_answer_unavailable_with_tritons_message(restricted: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(restricted.grpc_address)
    try:
        assert client.is_server_ready() and client.get_server_metadata().name
        for call, header in (
            (lambda **kw: client.get_model_repository_index(**kw), GRPC_ADMIN),
            (lambda **kw: client.get_model_config("simple", **kw), GRPC_ADMIN),
            (lambda **kw: client.get_inference_statistics("simple", **kw), GRPC_ADMIN),
            (lambda **kw: client.infer("simple", _inputs(grpcclient), **kw), GRPC_INFER),
        ):
            name = next(iter(header))
            with pytest.raises(InferenceServerException) as info:
                call()
            assert info.value.status() == "StatusCode.UNAVAILABLE"
            assert info.value.message() == f"This protocol is restricted, expecting header '{name}'"
            with pytest.raises(InferenceServerException, match="restricted"):
                call(headers={name: "wrong-value"})
            call(headers=dict(header))
        client.load_model("echo_int8", headers=GRPC_ADMIN)
        assert client.is_model_ready("echo_int8")
        client.unload_model("echo_int8", headers=GRPC_ADMIN)
    finally:
        client.close()


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--http-restricted-api=model-reposit,health:k1=v1", "unknown restricted API 'model-reposit'"),
        ("--grpc-restricted-protocol=health", "format is '<api>[,<api>...]:<key>=<value>'"),
    ],
)
def test_bad_restricted_flags_stop_the_server_with_exit_2(test_repository: Path, flag: str, message: str) -> None:
    cmd = [sys.executable, "-m", "servelab.cli", "serve", str(test_repository), "--http-port", "0",
           "--grpc-port", "0", "--metrics-port", "0", "--management-port", "0", flag]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "SERVELAB_PORTS" not in done.stdout
