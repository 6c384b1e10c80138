"""Hostile shapes, duplicate outputs and huge error messages, over the wire on every front door.

Each is 400 on REST and INVALID_ARGUMENT on gRPC (stock tritonclient), never 500 / INTERNAL. The
cases marked "regression" answered 500 / INTERNAL before this file existed (found by the fuzzers).
"""

from __future__ import annotations

import grpc
import httpx
import numpy as np
import orjson
import pytest
import tritonclient.grpc as tc
import tritonclient.http as th
from tritonclient.utils import InferenceServerException

from harness.servers import ServerProcess
from servelab.protocol import grpc_service_pb2 as pb
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc


def _rest_infer(server: ServerProcess, body: dict[str, object], model: str = "echo_fp32") -> httpx.Response:
    return httpx.post(f"{server.http_url}/v2/models/{model}/infer", content=orjson.dumps(body), timeout=10)


def _compat_predict(server: ServerProcess, route: str, model: str, value: str) -> httpx.Response:
    """POST the JSON text ``value`` as the tensor of one predict call on a compat door: TF Serving's
    ``{"inputs": value}`` on ``:predict`` or TorchServe's bare body on ``/predictions``."""
    if route == "tfserving":
        return httpx.post(f"{server.http_url}/v1/models/{model}:predict", content='{"inputs": ' + value + "}",
                          timeout=10)
    return httpx.post(f"{server.http_url}/predictions/{model}", content=value,
                      headers={"content-type": "application/json"}, timeout=10)


@pytest.fixture(scope="module")
def grpc_client(server: ServerProcess) -> tc.InferenceServerClient:
    return tc.InferenceServerClient(server.grpc_address)


def _fp32_input(shape: list[int], data: np.ndarray | None = None) -> tc.InferInput:
    inp = tc.InferInput("INPUT", shape, "FP32")
    if data is not None:
        inp.set_data_from_numpy(data)
    return inp


def test_duplicate_requested_outputs_are_refused_over_rest(server: ServerProcess) -> None:
    body = {"inputs": [{"name": "INPUT", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}],
            "outputs": [{"name": "OUTPUT"}, {"name": "OUTPUT"}]}
    r = _rest_infer(server, body)
    assert r.status_code == 400
    assert "output 'OUTPUT' is requested more than once" in r.json()["error"]


def test_duplicate_requested_outputs_are_refused_over_grpc(grpc_client: tc.InferenceServerClient) -> None:
    data = np.ones((1, 2), np.float32)
    outputs = [tc.InferRequestedOutput("OUTPUT"), tc.InferRequestedOutput("OUTPUT")]
    with pytest.raises(InferenceServerException) as info:
        grpc_client.infer("echo_fp32", [_fp32_input([1, 2], data)], outputs=outputs)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "'OUTPUT' is requested more than once" in info.value.message()


@pytest.mark.parametrize("shape", [[2**40, 2**40], [0, 2**62], [1] * 33, [2**31, 2**31, 0]])
def test_hostile_shapes_are_400_over_rest(server: ServerProcess, shape: list[int]) -> None:
    for extra in ({"data": []}, {"parameters": {"binary_data_size": 0}}):
        r = _rest_infer(server, {"inputs": [{"name": "INPUT", "shape": shape, "datatype": "FP32", **extra}]})
        assert r.status_code == 400, r.text
        assert "input 'INPUT'" in r.json()["error"]


@pytest.mark.parametrize("shape", [[2**40, 2**40], [0, 2**62], [1] * 33, [2**31, 2**31, 0]])
def test_hostile_shapes_are_invalid_argument_over_grpc(server: ServerProcess, shape: list[int]) -> None:
    """Regression: [0, 2**62] and [2**31, 2**31, 0] (no elements, but numpy refuses them) were INTERNAL."""
    msg = pb.ModelInferRequest(model_name="echo_fp32")
    inp = msg.inputs.add(name="INPUT", datatype="FP32")
    inp.shape.extend(shape)
    msg.raw_input_contents.append(b"")
    with grpc.insecure_channel(server.grpc_address) as channel, pytest.raises(grpc.RpcError) as info:
        pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(msg, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert "input 'INPUT'" in (info.value.details() or "")


def test_binary_data_size_past_the_body_is_400(server: ServerProcess) -> None:
    client = th.InferenceServerClient(server.http_address)
    header = orjson.dumps({"inputs": [{"name": "INPUT", "shape": [1, 4], "datatype": "FP32",
                                       "parameters": {"binary_data_size": 64}}]})
    r = httpx.post(f"{server.http_url}/v2/models/echo_fp32/infer", content=header + b"\0" * 16,
                   headers={"Inference-Header-Content-Length": str(len(header))}, timeout=10)
    assert r.status_code == 400 and "runs past the 16 bytes" in r.json()["error"]
    client.close()


def test_a_huge_error_message_reaches_a_stock_grpc_client_readable(grpc_client: tc.InferenceServerClient) -> None:
    """The message names the 200 kB input name; cut, it still arrives as INVALID_ARGUMENT, not a transport error."""
    name = "x" * 200_000
    inp = tc.InferInput(name, [1, 2], "FP32")
    inp.set_data_from_numpy(np.ones((1, 2), np.float32))
    with pytest.raises(InferenceServerException) as info:
        grpc_client.infer("echo_fp32", [inp])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT", info.value
    assert "unknown input" in info.value.message() and "bytes, cut]" in info.value.message()


@pytest.mark.parametrize("route", ["tfserving", "torchserve"])
def test_deeply_nested_bytes_values_are_400(server: ServerProcess, route: str) -> None:
    """Regression: unwrapping {"b64": ...} recursed once per level, a RecursionError (500) at ~900 levels."""
    r = _compat_predict(server, route, "echo_bytes", "[" * 950 + '{"b64": "AAAA"}' + "]" * 950)
    assert r.status_code == 400, r.text
    assert "nest more than" in r.text


@pytest.mark.parametrize("route", ["tfserving", "torchserve"])
def test_compat_shapes_over_the_element_limit_are_400(server: ServerProcess, route: str) -> None:
    r = _compat_predict(server, route, "echo_fp32", "[" * 33 + "1" + "]" * 33)
    assert r.status_code == 400, r.text
    assert "33 dimensions; the limit is 32" in r.text


def test_torchserve_describe_of_an_unregistered_model_is_404(explicit_server: ServerProcess) -> None:
    """Regression (schemathesis): an unloaded model answered 503 on the management API; TorchServe says 404."""
    for method, path in (("GET", "/models/echo_fp32"), ("PUT", "/models/echo_fp32?min_worker=1"),
                         ("DELETE", "/models/echo_fp32"), ("PUT", "/models/echo_fp32/1/set-default")):
        r = httpx.request(method, f"{explicit_server.management_url}{path}", timeout=10)
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["message"] == "Model not found: echo_fp32"
