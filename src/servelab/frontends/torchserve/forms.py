"""A TorchServe REST request as its handler sees it: parameters and headers, as TorchServe's frontend builds them.

TorchServe's ``InferenceRequestHandler.parseRequest``: a ``multipart/form-data`` or
``application/x-www-form-urlencoded`` body becomes one parameter per form field (a file field keeps
its content type, default ``application/octet-stream``; a plain field has none); any other body is
one parameter ``body`` with the request's MIME type (without parameters such as ``charset``). The
headers are the request's, plus ``url_path`` (what follows ``/predictions/{model}/{version}/``) and
``explain`` (``False``). Header names arrive lower-case here (ASGI), where TorchServe keeps the
client's spelling.
"""

from __future__ import annotations

import email.parser
import email.policy
import urllib.parse
from collections.abc import Iterable

from servelab.errors import InvalidArgument
from servelab.protocol.torchserve_envelope import BODY, TsRequest

__all__ = ["http_request", "mime_type"]

_FORM_URLENCODED = "application/x-www-form-urlencoded"
_OCTET_STREAM = "application/octet-stream"


def mime_type(content_type: str) -> str:
    """``text/plain; charset=utf-8`` -> ``text/plain`` (Netty's HttpUtil.getMimeType)."""
    return content_type.split(";", 1)[0].strip()


def _multipart(body: bytes, content_type: str) -> list[tuple[str, str, bytes]]:
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise InvalidArgument("multipart/form-data body without a boundary or parts; expected form fields")
    parts = []
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            raise InvalidArgument("a multipart/form-data part has no name (Content-Disposition: form-data; name=...)")
        payload = part.get_payload(decode=True)
        value = payload if isinstance(payload, bytes) else b""
        is_file = part.get_filename() is not None
        declared = part.get("content-type")
        kind = mime_type(str(declared)) if declared else _OCTET_STREAM
        parts.append((name, kind if is_file else "", value))
    return parts


def _urlencoded(body: bytes) -> list[tuple[str, str, bytes]]:
    pairs = urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
    return [(k, "", v.encode()) for k, v in pairs]


def http_request(
    body: bytes | bytearray, headers: Iterable[tuple[str, str]], url_path: str = "", explain: bool = False
) -> TsRequest:
    """The TorchServe request of an HTTP call to ``/predictions``."""
    header_map = dict(headers)
    header_map["url_path"] = url_path
    header_map["explain"] = "True" if explain else "False"
    content_type = header_map.get("content-type", "")
    kind = mime_type(content_type)
    data = bytes(body)
    if kind == "multipart/form-data":
        parameters = _multipart(data, content_type)
    elif kind.lower() == _FORM_URLENCODED:
        parameters = _urlencoded(data)
    else:
        parameters = [(BODY, kind, data)]
    return TsRequest(parameters, header_map)
