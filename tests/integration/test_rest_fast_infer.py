"""The inference route served in front of Starlette (frontends/rest/fast_infer.py), in process over ASGI.

The HTTP port's app is ``FastInfer(starlette_app)``. These tests send the same requests through it and
through the Starlette app alone (which still declares the inference routes) and require the same status,
body and headers: success (JSON and binary outputs, a version), the data plane's errors, body limits,
the door's keys and restricted header, trust checks on names. A recorder in front of the Starlette app
shows which requests the fast path took and that every other one still reaches the router.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from harness.inprocess import make_dataplane
from servelab.config.limits import LimitSettings
from servelab.config.settings import AuthSettings, ServerSettings
from servelab.core.dataplane import DataPlane
from servelab.frontends.auth import build_door
from servelab.frontends.rest.app import create_app
from servelab.frontends.rest.fast_infer import FastInfer, infer_path_params

INFERENCE_KEY = "i-" + "b" * 30
MANAGEMENT_KEY = "m-" + "a" * 30
KEY = {"authorization": f"Bearer {INFERENCE_KEY}"}
RESTRICTED = {"infer-key": "infer-value"}
LIMIT = 8192
COMPARED = ("content-type", "content-length", "inference-header-content-length", "www-authenticate")


@dataclass
class Answer:
    status: int
    body: bytes
    headers: dict[str, str]


class Recorder:
    """In front of the Starlette app: the (method, path) of every request that reached it."""

    def __init__(self, app: Starlette) -> None:
        self.app = app
        self.state = app.state  # what the fast path's endpoint reads through scope["app"]
        self.seen: list[tuple[str, str]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.seen.append((scope["method"], scope["path"]))
        await self.app(scope, receive, send)


def _send(app: ASGIApp, method: str, path: str, headers: dict[str, str] | None = None,
          body: bytes | None = None) -> Answer:
    async def go() -> Answer:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            r = await client.request(method, path, headers=headers, content=body)
        return Answer(r.status_code, r.content, {k: r.headers[k] for k in COMPARED if k in r.headers})

    return asyncio.run(go())


@pytest.fixture(scope="module")
def dataplane(test_repository: Path) -> Iterator[DataPlane]:
    dp = make_dataplane(test_repository, load=["simple"])
    yield dp
    dp.close()


def _app(dataplane: DataPlane, **auth: Any) -> FastInfer:
    settings = ServerSettings(auth=AuthSettings(**auth), limits=LimitSettings(max_body_bytes=LIMIT))
    return create_app(dataplane, settings, CollectorRegistry(), build_door(settings))


@pytest.fixture(scope="module")
def open_app(dataplane: DataPlane) -> FastInfer:
    return _app(dataplane)


@pytest.fixture(scope="module")
def guarded_app(dataplane: DataPlane) -> FastInfer:
    return _app(dataplane, inference_key=SecretStr(INFERENCE_KEY), management_key=SecretStr(MANAGEMENT_KEY),
                http_restricted_api=["inference:infer-key=infer-value"])


def _request(binary: bool = False, model_input: str = "INPUT0") -> bytes:
    data = list(range(16))
    doc: dict[str, Any] = {"inputs": [
        {"name": model_input, "shape": [1, 16], "datatype": "INT32", "data": data},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": data},
    ]}
    if binary:
        doc["outputs"] = [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]
    return json.dumps(doc).encode()


def _same(app: FastInfer, method: str, path: str, headers: dict[str, str] | None = None,
          body: bytes | None = None) -> Answer:
    """The answer through the fast path, which must equal the Starlette app's answer."""
    fast = _send(app, method, path, headers, body)
    assert fast == _send(app.app, method, path, headers, body), (method, path)
    return fast


@pytest.mark.parametrize(("path", "params"), [
    ("/v2/models/simple/infer", {"model": "simple"}),
    ("/v2/models/simple/versions/3/infer", {"model": "simple", "version": "3"}),
    ("/v2/models/versions/infer", {"model": "versions"}),
    ("/v2/models/simple/infer/", None),
    ("/v2/models//infer", None),
    ("/v2/models/simple/versions//infer", None),
    ("/v2/models/a/b/infer", None),
    ("/v2/models/a/versions/1/2/infer", None),
    ("/v2/models/infer", None),
    ("/v1/models/simple/infer", None),
])
def test_path_recognition_matches_the_router_templates(path: str, params: dict[str, str] | None) -> None:
    assert infer_path_params(path) == params


def test_inference_takes_the_fast_path_and_every_other_request_reaches_the_router(open_app: FastInfer) -> None:
    recorder = Recorder(open_app.app)
    app = FastInfer(open_app.app)
    app.app = recorder  # type: ignore[assignment]
    assert _send(app, "POST", "/v2/models/simple/infer", body=_request()).status == 200
    assert _send(app, "POST", "/v2/models/simple/versions/1/infer", body=_request()).status == 200
    assert recorder.seen == []
    assert _send(app, "GET", "/v2/models/simple").status == 200  # metadata: Starlette
    assert _send(app, "GET", "/v2/models/simple/infer").status == 405  # wrong method: Starlette's answer
    assert _send(app, "POST", "/v2/models/simple/infer/", body=_request()).status in (307, 404)
    assert _send(app, "POST", "/v2/repository/index", body=b"{}").status == 200
    assert recorder.seen == [("GET", "/v2/models/simple"), ("GET", "/v2/models/simple/infer"),
                             ("POST", "/v2/models/simple/infer/"), ("POST", "/v2/repository/index")]


def test_successful_inference_answers_as_the_router_does(open_app: FastInfer) -> None:
    answer = _same(open_app, "POST", "/v2/models/simple/infer", body=_request())
    outputs = {o["name"]: o["data"] for o in json.loads(answer.body)["outputs"]}
    assert outputs["OUTPUT0"] == [2 * i for i in range(16)] and outputs["OUTPUT1"] == [0] * 16
    assert answer.headers["content-type"] == "application/json"
    versioned = _same(open_app, "POST", "/v2/models/simple/versions/1/infer", body=_request())
    assert json.loads(versioned.body)["model_version"] == "1"
    binary = _same(open_app, "POST", "/v2/models/simple/infer", body=_request(binary=True))
    assert binary.headers["content-type"] == "application/octet-stream"
    assert int(binary.headers["inference-header-content-length"]) < len(binary.body)
    packed = _same(open_app, "POST", "/v2/models/simple/infer", {"content-encoding": "gzip"}, gzip.compress(_request()))
    assert packed.body == answer.body


@pytest.mark.parametrize(("path", "headers", "body", "status"), [
    ("/v2/models/missing/infer", {}, _request(), 404),
    ("/v2/models/simple/versions/7/infer", {}, _request(), 404),
    ("/v2/models/simple/versions/one/infer", {}, _request(), 404),  # an unknown version label
    ("/v2/models/simple/infer", {}, b"{not json", 400),
    ("/v2/models/simple/infer", {}, _request(model_input="NOPE"), 400),
    ("/v2/models/simple/infer", {}, b"x" * (LIMIT + 1), 413),
    ("/v2/models/simple/infer", {"content-encoding": "br"}, _request(), 400),
    ("/v2/models/simple/infer", {"inference-header-content-length": "999999"}, _request(), 400),
    ("/v2/models/..%2F..%2Fetc/infer", {}, _request(), None),
    ("/v2/models/bad%00name/infer", {}, _request(), None),
])
def test_errors_answer_as_the_router_does(
    open_app: FastInfer, path: str, headers: dict[str, str], body: bytes, status: int | None
) -> None:
    answer = _same(open_app, "POST", path, headers, body)
    if status is not None:
        assert answer.status == status, answer.body
    assert answer.status >= 400 and "error" in json.loads(answer.body), answer.body


@pytest.mark.parametrize(("headers", "status", "challenge"), [
    ({}, 401, 'Bearer realm="servelab"'),
    ({"authorization": "Bearer wrong", **RESTRICTED}, 401, 'Bearer realm="servelab", error="invalid_token"'),
    ({"authorization": f"Basic {INFERENCE_KEY}", **RESTRICTED}, 401, 'Bearer realm="servelab", error="invalid_token"'),
    (KEY, 403, None),
    ({**KEY, "infer-key": "wrong"}, 403, None),
    ({**KEY, **RESTRICTED}, 200, None),
    ({"authorization": f"Bearer {MANAGEMENT_KEY}", **RESTRICTED}, 200, None),
])
def test_the_door_holds_on_the_fast_path(
    guarded_app: FastInfer, headers: dict[str, str], status: int, challenge: str | None
) -> None:
    for path in ("/v2/models/simple/infer", "/v2/models/simple/versions/1/infer"):
        answer = _same(guarded_app, "POST", path, headers, _request())
        assert answer.status == status, answer.body
        assert answer.headers.get("www-authenticate") == challenge
        if status == 403:
            assert json.loads(answer.body) == {"error": "This API is restricted, expecting header 'infer-key'"}


def test_a_refused_request_is_refused_before_its_body_is_read(guarded_app: FastInfer) -> None:
    """The key check comes first: an oversized body without a key is 401, not 413."""
    assert _same(guarded_app, "POST", "/v2/models/simple/infer", {}, b"x" * (LIMIT + 1)).status == 401


def test_statistics_count_fast_path_requests(open_app: FastInfer, dataplane: DataPlane) -> None:
    def count() -> int:
        stats = dataplane.statistics("simple", "1")["model_stats"][0]["inference_stats"]
        return int(stats["success"]["count"])

    before = count()
    assert _send(open_app, "POST", "/v2/models/simple/infer", body=_request()).status == 200
    assert count() == before + 1


@pytest.mark.parametrize(("headers", "taken"), [
    ([(b"content-length", b"100")], (None,)),
    ([(b"content-length", b"100"), (b"inference-header-content-length", b"60")], ("60",)),
    ([(b"content-length", b"100"), (b"content-encoding", b"identity")], (None,)),
    ([(b"content-length", b"100"), (b"inference-header-content-length", b" 0 ")], None),  # raw binary request
    ([(b"content-length", b"100"), (b"content-encoding", b"gzip")], None),
    ([], None),  # chunked: the reader that counts as it goes
    ([(b"content-length", b"+100")], None),  # not plain digits: oip.infer says what is wrong
    ([(b"content-length", str(LIMIT + 1).encode())], None),  # 413 before a byte is read
    ([(b"content-length", b"100"), (b"content-length", b"x")], (None,)),  # the first counts, as in Starlette
])
def test_the_small_lane_takes_only_plain_requests_within_the_limits(
    headers: list[tuple[bytes, bytes]], taken: tuple[str | None] | None
) -> None:
    from servelab.frontends.rest.fast_infer import _small_request

    assert _small_request(headers, LimitSettings(max_body_bytes=LIMIT)) == taken


def test_small_and_full_lanes_answer_alike(open_app: FastInfer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small request is served without oip.infer; a gzip one goes through it; both answer the same."""
    from servelab.frontends.rest import oip

    calls: list[str] = []
    full = oip.infer

    async def counted(request: Any) -> Any:
        calls.append(request.url.path)
        return await full(request)

    monkeypatch.setattr(oip, "infer", counted)
    for binary in (False, True):
        small = _send(open_app, "POST", "/v2/models/simple/infer", body=_request(binary))
        assert calls == []
        packed = _send(open_app, "POST", "/v2/models/simple/infer", {"content-encoding": "gzip"}, gzip.compress(_request(binary)))
        assert calls == ["/v2/models/simple/infer"]
        calls.clear()
        assert small.status == 200 and small == packed


def _asgi(app: FastInfer, messages: list[dict[str, Any]], body_length: int | None) -> tuple[int, bytes]:
    """One POST to simple's infer route fed ``messages`` by receive (with a Content-Length of ``body_length``,
    none when None); (status, body) sent back."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/v2/models/simple/infer", "raw_path": b"/v2/models/simple/infer", "query_string": b"",
             "root_path": "", "headers": [(b"host", b"test"),
                                          *([] if body_length is None else [(b"content-length", str(body_length).encode())])],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}  # fmt: skip
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_the_small_lane_joins_a_body_sent_in_parts(open_app: FastInfer) -> None:
    body = _request()
    parts = [body[:7], body[7:50], body[50:]]
    status, answer = _asgi(open_app, [{"type": "http.request", "body": p, "more_body": i < 2} for i, p in enumerate(parts)], len(body))
    assert status == 200
    assert answer == _send(open_app.app, "POST", "/v2/models/simple/infer", body=body).body


def test_a_client_gone_mid_body_is_answered_as_the_router_does(open_app: FastInfer) -> None:
    body = _request()
    half = [{"type": "http.request", "body": body[:20], "more_body": True}]  # then http.disconnect
    small = _asgi(open_app, list(half), len(body))
    full = _asgi(open_app, list(half), None)  # no Content-Length: the full path's chunked reader
    assert small[0] >= 400

    def without_id(answer: tuple[int, bytes]) -> tuple[int, bytes]:  # each answer names its own request id
        return answer[0], re.sub(rb"request id [0-9a-f]+", b"request id ID", answer[1])

    assert without_id(small) == without_id(full)
