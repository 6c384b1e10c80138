"""Keys at the door of a real `servelab serve`: every protected route over HTTP (OIP, TF Serving, TorchServe
inference and management) and gRPC is refused without the key or with a wrong one, and accepted with the
right one, through tritonclient (``headers=``) and plain HTTP; health and /metrics stay open."""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from harness.servers import ServerProcess, running_server

MANAGEMENT = "mgmt-" + "k" * 27
INFERENCE = "infer-" + "q" * 26
WRONG = "wrong-" + "z" * 26

#: (method, path, level) for every protected REST route of the HTTP port
HTTP_ROUTES: list[tuple[str, str, str]] = [
    ("POST", "/v2/repository/index", "management"),
    ("POST", "/v2/repository/models/echo_int16/load", "management"),
    ("POST", "/v2/repository/models/echo_int16/unload", "management"),
    ("GET", "/v2", "inference"),
    ("GET", "/v2/", "inference"),
    ("GET", "/v2/models/stats", "inference"),
    ("GET", "/v2/models/simple", "inference"),
    ("GET", "/v2/models/simple/versions/1", "inference"),
    ("GET", "/v2/models/simple/config", "inference"),
    ("GET", "/v2/models/simple/versions/1/config", "inference"),
    ("GET", "/v2/models/simple/stats", "inference"),
    ("GET", "/v2/models/simple/versions/1/stats", "inference"),
    ("POST", "/v2/models/simple/infer", "inference"),
    ("POST", "/v2/models/simple/versions/1/infer", "inference"),
    ("GET", "/v1/models/simple", "inference"),
    ("POST", "/v1/models/simple:predict", "inference"),
    ("POST", "/predictions/simple", "inference"),
    ("PUT", "/predictions/simple/1", "inference"),
]
#: every route of the TorchServe management port (all need the management key)
MANAGEMENT_ROUTES: list[tuple[str, str]] = [
    ("OPTIONS", "/"),
    ("GET", "/models"),
    ("POST", "/models?url=echo_uint16"),
    ("GET", "/models/simple"),
    ("GET", "/models/simple/1"),
    ("PUT", "/models/simple?min_worker=1"),
    ("PUT", "/models/simple/1?min_worker=1"),
    ("DELETE", "/models/echo_uint16"),
    ("DELETE", "/models/echo_uint16/1"),
    ("PUT", "/models/simple/1/set-default"),
]
OPEN_ROUTES = ["/v2/health/live", "/v2/health/ready", "/v2/models/simple/ready", "/ping", "/metrics"]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def keyed(test_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    flags = ["--model-control-mode", "explicit", "--load-model", "simple",
             "--management-key", MANAGEMENT, "--inference-key", INFERENCE]
    with running_server(test_repository, tmp_path_factory.mktemp("logs"), "keyed", *flags) as s:
        yield s


@pytest.fixture(scope="module")
def http(keyed: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client


def _assert_refused(response: httpx.Response, invalid: bool) -> None:
    assert response.status_code == 401, response.text
    challenge = response.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer") and ('error="invalid_token"' in challenge) == invalid
    assert MANAGEMENT not in response.text and INFERENCE not in response.text


@pytest.mark.parametrize(("method", "path", "level"), HTTP_ROUTES)
def test_http_routes_refuse_a_missing_or_wrong_key(
    keyed: ServerProcess, http: httpx.Client, method: str, path: str, level: str
) -> None:
    url = keyed.http_url + path
    missing = http.request(method, url)
    _assert_refused(missing, invalid=False)
    assert f"needs the {level} key" in missing.text
    _assert_refused(http.request(method, url, headers=bearer(WRONG)), invalid=True)
    _assert_refused(http.request(method, url, headers={"Authorization": MANAGEMENT}), invalid=True)
    if level == "management":
        _assert_refused(http.request(method, url, headers=bearer(INFERENCE)), invalid=True)
    else:
        assert http.request(method, url, headers=bearer(INFERENCE)).status_code != 401
    assert http.request(method, url, headers=bearer(MANAGEMENT)).status_code not in (401, 403)


def test_torchserve_inference_refusal_has_torchserve_shape(keyed: ServerProcess, http: httpx.Client) -> None:
    body = http.post(keyed.http_url + "/predictions/simple", json=[1]).json()
    assert body["code"] == 401 and body["type"] == "InvalidKeyException"
    assert "Authorization: Bearer" in body["message"]
    oip = http.post(keyed.http_url + "/v2/models/simple/infer", json={}).json()
    assert set(oip) == {"error"}


@pytest.mark.parametrize(("method", "path"), MANAGEMENT_ROUTES)
def test_management_port_refuses_every_route_without_the_management_key(
    keyed: ServerProcess, http: httpx.Client, method: str, path: str
) -> None:
    url = keyed.management_url + path
    for headers in ({}, bearer(WRONG), bearer(INFERENCE)):
        response = http.request(method, url, headers=headers)
        assert response.status_code == 401, (headers, response.text)
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        body = response.json()
        assert body["code"] == 401 and body["type"] == "InvalidKeyException" and body["message"]


def test_management_port_works_with_the_management_key(keyed: ServerProcess, http: httpx.Client) -> None:
    headers = bearer(MANAGEMENT)
    assert {"modelName": "simple", "modelUrl": "simple"} in http.get(keyed.management_url + "/models", headers=headers).json()["models"]
    registered = http.post(keyed.management_url + "/models", params={"url": "echo_uint16"}, headers=headers)
    assert registered.status_code == 200, registered.text
    assert http.get(keyed.management_url + "/models/echo_uint16", headers=headers).status_code == 200
    assert http.delete(keyed.management_url + "/models/echo_uint16", headers=headers).status_code == 200


@pytest.mark.parametrize("path", OPEN_ROUTES)
def test_health_and_metrics_stay_open(keyed: ServerProcess, http: httpx.Client, path: str) -> None:
    assert http.get(keyed.http_url + path).status_code == 200
    assert http.get(f"{keyed.metrics_url}/metrics").status_code == 200


def test_tritonclient_http_repository_control_and_infer_need_their_keys(keyed: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(keyed.http_address)
    try:
        assert client.is_server_ready()
        for call in (client.get_model_repository_index, lambda **kw: client.load_model("echo_int32", **kw),
                     lambda **kw: client.unload_model("echo_int32", **kw)):
            with pytest.raises(InferenceServerException, match="needs the management key") as info:
                call()
            assert info.value.status() == "401"
            with pytest.raises(InferenceServerException, match="not valid"):
                call(headers=bearer(INFERENCE))
        client.load_model("echo_int32", headers=bearer(MANAGEMENT))
        assert client.is_model_ready("echo_int32")
        inputs = [httpclient.InferInput("INPUT", [1, 3], "INT32")]
        inputs[0].set_data_from_numpy(np.array([[4, 5, 6]], dtype=np.int32))
        with pytest.raises(InferenceServerException, match="needs the inference key"):
            client.infer("echo_int32", inputs)
        result = client.infer("echo_int32", inputs, headers=bearer(INFERENCE))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT"), [[4, 5, 6]])
        client.unload_model("echo_int32", headers=bearer(MANAGEMENT))
    finally:
        client.close()


def _grpc_refused(call, code: str = "StatusCode.UNAUTHENTICATED", text: str = "key") -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InferenceServerException) as info:
        call()
    assert info.value.status() == code, info.value
    assert text in info.value.message()


def test_grpc_protected_rpcs_refuse_missing_and_wrong_keys(keyed: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(keyed.grpc_address)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    for i in inputs:
        i.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
    management_calls = [
        lambda **kw: client.get_model_repository_index(**kw),
        lambda **kw: client.load_model("echo_int64", **kw),
        lambda **kw: client.unload_model("echo_int64", **kw),
    ]
    inference_calls = [
        lambda **kw: client.infer("simple", inputs, **kw),
        lambda **kw: client.get_model_metadata("simple", **kw),
        lambda **kw: client.get_model_config("simple", **kw),
        lambda **kw: client.get_inference_statistics("simple", **kw),
        lambda **kw: client.get_server_metadata(**kw),
    ]
    try:
        assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("simple")
        for call in management_calls + inference_calls:
            _grpc_refused(call, text="Authorization: Bearer")
            _grpc_refused(lambda c=call: c(headers={"authorization": f"Bearer {WRONG}"}), text="not valid")
        for call in management_calls:
            _grpc_refused(lambda c=call: c(headers={"authorization": f"Bearer {INFERENCE}"}), text="not valid")
        management = {"authorization": f"Bearer {MANAGEMENT}"}
        inference = {"authorization": f"Bearer {INFERENCE}"}
        client.load_model("echo_int64", headers=management)
        assert client.is_model_ready("echo_int64")
        client.unload_model("echo_int64", headers=management)
        assert "simple" in {m.name for m in client.get_model_repository_index(headers=management).models}
        result = client.infer("simple", inputs, headers=inference)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * np.arange(16).reshape(1, 16))
        assert client.get_model_metadata("simple", headers=management).name == "simple"
    finally:
        client.close()


def test_grpc_stream_infer_needs_the_inference_key(keyed: ServerProcess) -> None:
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    for i in inputs:
        i.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    for headers, ok in ((None, False), ({"authorization": f"Bearer {WRONG}"}, False),
                        ({"authorization": f"Bearer {INFERENCE}"}, True)):
        results: queue.Queue[object] = queue.Queue()
        client = grpcclient.InferenceServerClient(keyed.grpc_address)
        try:
            client.start_stream(callback=lambda result, error, q=results: q.put(error or result), headers=headers)
            # a refused stream may be closed before the request is queued: the callback has the error
            with contextlib.suppress(InferenceServerException):
                client.async_stream_infer("simple", inputs)
            answer = results.get(timeout=30)
        finally:
            client.stop_stream()
            client.close()
        if ok:
            assert not isinstance(answer, InferenceServerException), answer
            np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), np.full((1, 16), 2))  # type: ignore[attr-defined]
        else:
            assert isinstance(answer, InferenceServerException), answer
            assert answer.status() == "StatusCode.UNAUTHENTICATED"
