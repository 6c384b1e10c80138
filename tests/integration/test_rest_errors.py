"""Bad requests get their status and a message naming the problem, while other clients keep being served."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import httpx
import numpy as np
import orjson
import pytest

from harness.load import RequestLoop
from harness.servers import MAX_BODY_BYTES, ServerProcess

SIMPLE_OK = orjson.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
        ]
    }
)


def _simple_answered(r: httpx.Response) -> bool:
    return r.status_code == 200 and r.json()["outputs"][0]["data"][:2] == [1, 2]


@pytest.fixture(scope="module")
def background(server: ServerProcess) -> Iterator[RequestLoop]:
    """Valid ``simple`` requests in a loop (at most 5000, for at most 60 s) while the module's tests run."""
    url = f"{server.http_url}/v2/models/simple/infer"
    with RequestLoop(url, SIMPLE_OK, ok=_simple_answered, max_requests=5000, max_s=60.0, timeout_s=10.0) as bg:
        yield bg
    assert bg.statuses, "the background client sent nothing"
    assert not bg.failures, bg.failures[:3]
    assert set(bg.statuses) == {200}


@pytest.fixture(scope="module")
def http(server: ServerProcess, background: RequestLoop) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=10.0) as client:
        yield client


def _infer_body(inputs: list[dict[str, object]], **extra: object) -> bytes:
    return orjson.dumps({"inputs": inputs, **extra})


def _i32(shape: list[int], data: object, name: str = "INPUT0", datatype: str = "INT32") -> dict[str, object]:
    return {"name": name, "shape": shape, "datatype": datatype, "data": data}


def _expect(response: httpx.Response, status: int, *fragments: str) -> None:
    assert response.status_code == status, response.text
    message = response.json()["error"]
    for fragment in fragments:
        assert fragment in message, message


def test_malformed_json(http: httpx.Client) -> None:
    _expect(http.post("/v2/models/simple/infer", content=b'{"inputs": ['), 400, "not valid JSON")
    _expect(http.post("/v2/models/simple/infer", content=b"[1, 2]"), 400, "must be a JSON object")
    _expect(http.post("/v2/models/simple/infer", content=b'{"outputs": []}'), 400, "'inputs' list")
    bad_shape = _infer_body([_i32([1, "16"], [0] * 16)])
    _expect(http.post("/v2/models/simple/infer", content=bad_shape), 400, "'shape' must be a list")


def test_wrong_datatype(http: httpx.Client) -> None:
    body = _infer_body([_i32([1, 16], [0.5] * 16, datatype="FP32"), _i32([1, 16], [1] * 16, "INPUT1")])
    _expect(http.post("/v2/models/simple/infer", content=body), 400, "INPUT0", "datatype FP32; expected INT32")
    body = _infer_body([_i32([1, 16], [0] * 16, datatype="FLOAT99")])
    _expect(http.post("/v2/models/simple/infer", content=body), 400, "unknown datatype 'FLOAT99'")


def test_wrong_shape(http: httpx.Client) -> None:
    body = _infer_body([_i32([1, 15], [0] * 15), _i32([1, 15], [1] * 15, "INPUT1")])
    _expect(http.post("/v2/models/simple/infer", content=body), 400, "shape [1, 15]", "expected INT32")


def test_data_length_not_matching_shape(http: httpx.Client) -> None:
    body = _infer_body([_i32([1, 16], [0] * 15), _i32([1, 16], [1] * 16, "INPUT1")])
    _expect(http.post("/v2/models/simple/infer", content=body), 400, "needs 16 elements; data has 15")


def test_bytes_data_must_be_strings(http: httpx.Client) -> None:
    body = _infer_body([{"name": "INPUT", "shape": [1, 1], "datatype": "BYTES", "data": [10**9]}])
    _expect(http.post("/v2/models/echo_bytes/infer", content=body), 400, "BYTES data must be strings")


def _binary(header: dict[str, object], tail: bytes, header_length: int | None = None) -> tuple[bytes, dict[str, str]]:
    raw = orjson.dumps(header)
    length = len(raw) if header_length is None else header_length
    return raw + tail, {"Inference-Header-Content-Length": str(length), "Content-Type": "application/octet-stream"}


def _binary_input(name: str, size: int) -> dict[str, object]:
    return {"name": name, "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": size}}


def test_lying_inference_header_content_length(http: httpx.Client) -> None:
    header = {"inputs": [_binary_input("INPUT0", 64), _binary_input("INPUT1", 64)]}
    tail = np.arange(32, dtype=np.int32).tobytes()
    body, headers = _binary(header, tail, header_length=100_000)
    _expect(http.post("/v2/models/simple/infer", content=body, headers=headers), 400,
            "Inference-Header-Content-Length is 100000", "body has only")
    body, headers = _binary(header, tail, header_length=20)
    _expect(http.post("/v2/models/simple/infer", content=body, headers=headers), 400, "not valid JSON")
    body, headers = _binary(header, tail)
    headers["Inference-Header-Content-Length"] = "ten"
    _expect(http.post("/v2/models/simple/infer", content=body, headers=headers), 400, "not an integer")


def test_binary_sizes_not_adding_up(http: httpx.Client) -> None:
    tail = np.arange(32, dtype=np.int32).tobytes()
    exact = {"inputs": [_binary_input("INPUT0", 64), _binary_input("INPUT1", 64)]}
    body, headers = _binary(exact, tail + b"\x00" * 4)
    _expect(http.post("/v2/models/simple/infer", content=body, headers=headers), 400, "add up to 128", "132 bytes")
    long = {"inputs": [_binary_input("INPUT0", 64), _binary_input("INPUT1", 80)]}
    body, headers = _binary(long, tail)
    _expect(http.post("/v2/models/simple/infer", content=body, headers=headers), 400, "binary_data_size 80", "runs past")
    wrong = {"inputs": [_binary_input("INPUT0", 60), _binary_input("INPUT1", 68)]}
    body, headers = _binary(wrong, tail)
    _expect(http.post("/v2/models/simple/infer", content=body, headers=headers), 400, "needs 64 bytes of data; got 60")
    huge = {"inputs": [{"name": "INPUT", "shape": [1, 10**8], "datatype": "BYTES", "parameters": {"binary_data_size": 8}}]}
    body, headers = _binary(huge, struct.pack("<I", 4) + b"abcd")
    _expect(http.post("/v2/models/echo_bytes/infer", content=body, headers=headers), 400, "elements; the limit is")


def test_unknown_model_and_version(http: httpx.Client) -> None:
    _expect(http.post("/v2/models/nope/infer", content=SIMPLE_OK), 404, "Request for unknown model: 'nope'")
    _expect(http.post("/v2/models/simple/versions/9/infer", content=SIMPLE_OK), 404, "'simple' version 9 is not found")
    _expect(http.get("/v2/models/nope"), 404, "Request for unknown model: 'nope'")
    _expect(http.get("/v2/models/simple/versions/9/ready"), 404, "'simple' version 9 is not found")
    _expect(http.get("/v2/not/a/route"), 404, "no route for GET /v2/not/a/route")
    _expect(http.put("/v2/models/simple/infer", content=SIMPLE_OK), 405, "method PUT is not allowed")


def test_oversize_body_is_413_before_reading(http: httpx.Client) -> None:
    big = b"x" * (MAX_BODY_BYTES + 1)
    _expect(http.post("/v2/models/simple/infer", content=big), 413, f"the limit is {MAX_BODY_BYTES} bytes")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is enforced while streaming
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            yield b"y" * 65536

    _expect(http.post("/v2/models/simple/infer", content=chunks()), 413, f"the limit is {MAX_BODY_BYTES} bytes")


def test_unknown_requested_output_and_bad_parameters(http: httpx.Client) -> None:
    inputs = orjson.loads(SIMPLE_OK)["inputs"]
    body = _infer_body(inputs, outputs=[{"name": "OUTPUT9"}])
    _expect(http.post("/v2/models/simple/infer", content=body), 400, "unknown requested output 'OUTPUT9'")
    body = _infer_body(inputs, outputs=[{"name": "OUTPUT0", "parameters": {"classification": -1}}])
    _expect(http.post("/v2/models/simple/infer", content=body), 400, "classification must be an integer >= 0")
    body = _infer_body(inputs, parameters={"binary_data_output": "yes"})
    _expect(http.post("/v2/models/simple/infer", content=body), 400, "binary_data_output must be true or false")


def test_json_bf16_nested_data_and_binary_output_parameter(http: httpx.Client) -> None:
    body = _infer_body([{"name": "INPUT", "shape": [2, 2], "datatype": "BF16", "data": [[1.5, -2.0], [0.25, 8.0]]}])
    r = http.post("/v2/models/echo_bf16/infer", content=body)
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    assert out["datatype"] == "BF16" and out["shape"] == [2, 2] and out["data"] == [1.5, -2.0, 0.25, 8.0]
    body = _infer_body(orjson.loads(SIMPLE_OK)["inputs"], parameters={"binary_data_output": True},
                       outputs=[{"name": "OUTPUT0"}, {"name": "OUTPUT1", "parameters": {"binary_data": False}}])
    r = http.post("/v2/models/simple/infer", content=body)
    assert r.status_code == 200, r.text
    n = int(r.headers["Inference-Header-Content-Length"])
    header = orjson.loads(r.content[:n])
    assert header["outputs"][0]["parameters"]["binary_data_size"] == 64
    assert header["outputs"][1]["data"] == [i - 1 for i in range(16)]
    np.testing.assert_array_equal(np.frombuffer(r.content[n:], dtype=np.int32), np.arange(16) + 1)


def test_raw_binary_request(http: httpx.Client) -> None:
    scores = np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32)
    r = http.post("/v2/models/classify/infer", content=scores.tobytes(), headers={"Inference-Header-Content-Length": "0"})
    assert r.status_code == 200, r.text
    n = int(r.headers["Inference-Header-Content-Length"])
    assert orjson.loads(r.content[:n])["outputs"][0]["shape"] == [1, 4]
    np.testing.assert_array_equal(np.frombuffer(r.content[n:], dtype=np.float32), scores)
    r = http.post("/v2/models/simple/infer", content=b"\x00" * 64, headers={"Inference-Header-Content-Length": "0"})
    _expect(r, 400, "exactly one input")


def test_server_still_ready_after_bad_requests(http: httpx.Client, background: RequestLoop) -> None:
    assert http.get("/v2/health/ready").status_code == 200
    assert len(background.statuses) > 0


def test_compressed_bodies_and_decompression_bombs(http: httpx.Client) -> None:
    import gzip
    import zlib

    ok = http.post("/v2/models/simple/infer", content=gzip.compress(SIMPLE_OK), headers={"Content-Encoding": "gzip"})
    assert ok.status_code == 200, ok.text
    assert ok.json()["outputs"][0]["data"][:2] == [1, 2]
    deflated = zlib.compress(SIMPLE_OK)
    ok = http.post("/v2/models/simple/infer", content=deflated, headers={"Content-Encoding": "deflate"})
    assert ok.status_code == 200, ok.text
    bomb = gzip.compress(b" " * (MAX_BODY_BYTES * 3))  # a few KB on the wire, 12 MB inflated
    _expect(http.post("/v2/models/simple/infer", content=bomb, headers={"Content-Encoding": "gzip"}), 413, "decompressed")
    _expect(
        http.post("/v2/models/simple/infer", content=b"not gzip", headers={"Content-Encoding": "gzip"}),
        400, "not valid gzip",
    )
    _expect(http.post("/v2/models/simple/infer", content=SIMPLE_OK, headers={"Content-Encoding": "br"}), 400, "'br'")
