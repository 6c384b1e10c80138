"""The HTTP port's hot route served in front of Starlette: ``POST /v2/models/{model}[/versions/{v}]/infer``.

Starlette's middleware stack and router (two exception middlewares, the route scan, the
``request_response`` wrapper) cost about a fifth of the server's CPU per small inference request. The
:class:`FastInfer` ASGI callable recognises the inference path and method with a few string checks and
runs the same endpoint (:func:`servelab.frontends.rest.oip.infer`: same body limits, decode, data plane
call, encode and headers) with the same door check (:func:`servelab.frontends.auth.check_scope` on the
route's own requirement) and the same error handlers (:func:`servelab.frontends.rest.errors.handled_error`).
Every other request, and any path the checks do not take as exactly one of the two templates, goes to the
Starlette app unchanged, so its router stays the one authority on every other route.
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive, Scope, Send

from servelab.config.limits import LimitSettings
from servelab.frontends.auth import Door, check_scope, route_requirement
from servelab.frontends.rest import oip
from servelab.frontends.rest._body import LARGE_BODY_BYTES
from servelab.frontends.rest.errors import handled_error

__all__ = ["INFER_TEMPLATES", "FastInfer", "infer_path_params"]

_PREFIX = "/v2/models/"
_SUFFIX = "/infer"
_PLAIN = "/v2/models/{model}/infer"
_VERSIONED = "/v2/models/{model}/versions/{version}/infer"
#: the Starlette path templates this front serves (oip.routes() declares the same two)
INFER_TEMPLATES = (_PLAIN, _VERSIONED)


def infer_path_params(path: str) -> dict[str, str] | None:
    """``{"model": ..., ["version": ...]}`` when ``path`` is one of the two inference templates, else None.

    The same matches as Starlette's ``{name}`` parameter (one non-empty segment without ``/``); anything
    else (a trailing slash, an empty segment, more segments) is left to the router and its answer.
    """
    if not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)):
        return None
    parts = path[len(_PREFIX) : -len(_SUFFIX)].split("/")
    if len(parts) == 1 and parts[0]:
        return {"model": parts[0]}
    if len(parts) == 3 and parts[1] == "versions" and parts[0] and parts[2]:
        return {"model": parts[0], "version": parts[2]}
    return None


class FastInfer:
    """ASGI app: the inference route served directly, everything else by ``app`` (the Starlette app)."""

    def __init__(self, app: Starlette, door: Door | None = None) -> None:
        self.app = app
        self._plain = route_requirement(door, "POST", _PLAIN)
        self._versioned = route_requirement(door, "POST", _VERSIONED)

    @property
    def state(self) -> Any:
        """The Starlette app's state (data plane, settings, shared memory), as ``create_app`` set it."""
        return self.app.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            params = infer_path_params(scope["path"])
            if params is not None:
                await self._infer(scope, receive, send, params)
                return
        await self.app(scope, receive, send)

    async def _infer(self, scope: Scope, receive: Receive, send: Send, params: dict[str, str]) -> None:
        scope["app"] = self.app  # what Starlette sets: the endpoint and the handlers read app.state
        scope["path_params"] = params
        requirement = self._versioned if "version" in params else self._plain
        try:
            if requirement is not None:
                check_scope(requirement, scope)
            state = self.app.state
            small = _small_request(scope["headers"], state.settings.limits)
            if small is not None:  # the common request, read and answered without Starlette's objects
                await _small_infer(state, scope, receive, send, params, small)
                return
            response = await oip.infer(Request(scope, receive, send))
        except Exception as exc:  # what the app's exception middlewares would answer
            response = await handled_error(Request(scope, receive, send), exc)
        await response(scope, receive, send)


def _small_request(headers: list[tuple[bytes, bytes]], limits: LimitSettings) -> tuple[str | None] | None:
    """``(Inference-Header-Content-Length or None,)`` for a request the small lane takes: a Content-Length
    within every size limit that would send its body or its decoding elsewhere (413, the chunked reader,
    the decode thread), no content encoding, not a raw binary request (header length 0); else None, and
    :func:`oip.infer` serves it (its checks and errors unchanged). The first of a repeated header counts,
    as in Starlette's ``Headers.get``."""
    declared = header_length = encoding = None
    for name, value in headers:
        if name == b"content-length":
            declared = value if declared is None else declared
        elif name == b"inference-header-content-length":
            header_length = value if header_length is None else header_length
        elif name == b"content-encoding":
            encoding = value if encoding is None else encoding
    if declared is None or not declared.isdigit() or (encoding is not None and encoding.strip().lower() not in (b"", b"identity")):
        return None
    size = int(declared)
    if size > min(limits.max_body_bytes, LARGE_BODY_BYTES, limits.offload_decode_bytes):
        return None
    if header_length is None:
        return (None,)
    text = header_length.decode("latin-1")
    return None if text.strip() == "0" else (text,)


async def _small_infer(
    state: Any, scope: Scope, receive: Receive, send: Send, params: dict[str, str], small: tuple[str | None]
) -> None:
    """:func:`oip.infer` for a request :func:`_small_request` took: the same :func:`oip.answer_infer`, status,
    headers and body, without Starlette's Request and Response objects per call."""
    message = await receive()
    if message["type"] != "http.request":
        raise ClientDisconnect()  # what Request.body() raises
    body = message.get("body", b"")
    if message.get("more_body", False):
        chunks = [body]
        while message.get("more_body", False):
            message = await receive()
            if message["type"] != "http.request":
                raise ClientDisconnect()
            chunks.append(message.get("body", b""))
        body = b"".join(chunks)
    payload, json_length = await oip.answer_infer(
        state.dataplane, state.settings.limits, state.shared_memory, body, small[0], params["model"],
        params.get("version", ""), Headers(scope=scope),
    )  # fmt: skip
    length = str(len(payload)).encode()
    if json_length is None:
        headers = [(b"content-length", length), (b"content-type", b"application/json")]
    else:  # the order Starlette's Response gives them
        headers = [(b"inference-header-content-length", str(json_length).encode()), (b"content-length", length),
                   (b"content-type", b"application/octet-stream")]  # fmt: skip
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
