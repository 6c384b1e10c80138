"""TorchServe's wire without a server: the envelope tensors, TorchServe's worker frames, form bodies, Gson
bytes, and every TorchServe RPC classified in the auth table."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from servelab.backends._torchserve_otf import BufferConnection, encode_batch, parse_response
from servelab.config.settings import ApiGroup
from servelab.errors import InvalidArgument
from servelab.frontends.auth import GRPC_METHODS
from servelab.frontends.torchserve.forms import http_request, mime_type
from servelab.frontends.torchserve.wire import grpc_code, rest_error_body
from servelab.protocol import torchserve as ts_pb
from servelab.protocol.torchserve_envelope import TsRequest, TsResponse


def test_request_and_response_round_trip_through_tensors() -> None:
    request = TsRequest([("data", "image/png", b"\x89PNG\x00"), ("k", "", b"v")], {"content-type": "multipart/form-data"})
    body, meta = request.to_rows()
    assert body.shape == (1, 2) and meta.shape == (1, 1)
    assert TsRequest.from_row(body[0], meta[0]) == request
    assert TsRequest.from_row(body[0], None).parameters == [("body", "", b"\x89PNG\x00"), ("body1", "", b"v")]
    answer = TsResponse([b"one ", b"two"], 206, "Partial", "text/plain", {"ts_stream_next": "true"})
    outputs = answer.to_outputs()
    back = TsResponse.from_outputs(outputs["response"][0], outputs["response_meta"][0])
    assert back == answer and back.streamed and back.body == b"one two"


@pytest.mark.parametrize("meta", [b"[]", b"{not json", b'{"names": ["a", "b"]}', b'{"names": [1]}', b'{"names": ["a"], "headers": {"h": 1}}'])
def test_bad_request_meta_is_refused(meta: bytes) -> None:
    body = np.array([b"x"], dtype=object)
    with pytest.raises(InvalidArgument, match="request"):
        TsRequest.from_row(body, np.array([meta], dtype=object))


@pytest.mark.skipif(importlib.util.find_spec("ts") is None, reason="TorchServe's ts package is not installed")
def test_frames_are_what_torchserve_reads_and_writes() -> None:
    from ts.context import Context, RequestProcessor
    from ts.protocol.otf_message_handler import create_predict_response, retrieve_msg

    frames = encode_batch([("r1", TsRequest([("body", "application/json", b'{"a": 1}')], {"x-h": "v"})),
                           ("r2", TsRequest([("body", "text/plain", b"hi"), ("raw", "", b"\x00")]))])  # fmt: skip
    command, batch = retrieve_msg(BufferConnection(frames))
    assert command == b"I" and [r["requestId"] for r in batch] == [b"r1", b"r2"]
    assert batch[0]["parameters"][0]["value"] == {"a": 1} and batch[1]["parameters"][0]["value"] == "hi"
    assert batch[1]["parameters"][1]["value"] == b"\x00" and batch[0]["headers"] == [{"name": b"x-h", "value": b"v"}]
    context = Context("m", "/tmp", {}, 2, None, "0.12.0")
    context.request_processor = [RequestProcessor({}), RequestProcessor({})]
    context.set_response_content_type(1, "text/plain")
    context.set_response_status(404, "Nope", 1)
    parsed = parse_response(create_predict_response([{"k": [1]}, "text"], {0: "r1", 1: "r2"}, "ok", 200, context))
    first, second = parsed.predictions
    assert (parsed.code, first.value, first.content_type) == (200, b'{\n  "k": [\n    1\n  ]\n}', "")
    assert (second.status, second.phrase, second.content_type, second.value) == (404, "Nope", "text/plain", b"text")
    failed = parse_response(create_predict_response(None, {0: "r1"}, "Prediction failed", 503))
    assert (failed.code, failed.message, failed.predictions[0].value) == (503, "Prediction failed", b"error")


def test_http_requests_become_torchserve_parameters() -> None:
    assert mime_type("application/json; charset=utf-8") == "application/json"
    raw = http_request(b"[1]", [("content-type", "application/json; charset=utf-8")], "a/b")
    assert raw.parameters == [("body", "application/json", b"[1]")]
    assert raw.headers["url_path"] == "a/b" and raw.headers["explain"] == "False"
    boundary = "XyZ"
    form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"data\"; filename=\"k.png\"\r\nContent-Type: image/png\r\n\r\n"
            f"\x89PNG\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhello\r\n--{boundary}--\r\n").encode("latin-1")
    parts = http_request(form, [("content-type", f"multipart/form-data; boundary={boundary}")]).parameters
    assert parts == [("data", "image/png", b"\x89PNG"), ("note", "", b"hello")]
    urlencoded = http_request(b"a=1&b=", [("content-type", "application/x-www-form-urlencoded")]).parameters
    assert urlencoded == [("a", "", b"1"), ("b", "", b"")]


def test_torchserve_json_and_status_codes() -> None:
    assert rest_error_body(404, "Model not found: m") == (
        b'{\n  "code": 404,\n  "type": "ModelNotFoundException",\n  "message": "Model not found: m"\n}\n')
    assert grpc_code(503).name == "UNAVAILABLE" and grpc_code(507).name == "INTERNAL" and grpc_code(418).name == "FAILED_PRECONDITION"


def test_every_torchserve_rpc_is_classified() -> None:
    for module, service in ((ts_pb.inference_pb2, "InferenceAPIsService"), (ts_pb.management_pb2, "ManagementAPIsService")):
        descriptor = module.DESCRIPTOR.services_by_name[service]
        for method in descriptor.methods:
            assert f"/{descriptor.full_name}/{method.name}" in GRPC_METHODS, method.full_name
    assert GRPC_METHODS[f"/{ts_pb.INFERENCE_SERVICE}/Predictions"] is ApiGroup.INFERENCE
    assert GRPC_METHODS[f"/{ts_pb.MANAGEMENT_SERVICE}/RegisterModel"] is ApiGroup.MODEL_REPOSITORY
