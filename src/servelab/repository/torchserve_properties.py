"""TorchServe's ``config.properties`` (``torchserve --ts-config``): the keys that decide what servelab serves.

The file is Java's properties format (``key=value``, ``key: value`` or ``key value``; ``#`` and ``!``
comments; a trailing backslash continues a line, as the multi-line ``models={...}`` JSON does).
Read here: the four addresses (inference, management, metrics; gRPC inference/management address and
port), ``model_store``, ``load_models``, ``models`` (per model and version: minWorkers, maxWorkers,
batchSize, maxBatchDelay, responseTimeout, defaultVersion, marName), ``default_workers_per_model``,
``default_response_timeout``, ``max_request_size``, ``service_envelope`` (the request envelope of every
handler), ``disable_token_authorization`` and ``enable_model_api``. Every other key is listed once in the log as not used (TorchServe tuning such as
netty threads, or features servelab has otherwise: TLS keystores are refused with a message).
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab.errors import InvalidArgument

__all__ = ["DEFAULTS", "Address", "TorchServeProperties", "parse_properties", "read_properties"]

#: TorchServe 0.12's defaults for the keys servelab reads
DEFAULTS = {
    "inference_address": "http://127.0.0.1:8080",
    "management_address": "http://127.0.0.1:8081",
    "metrics_address": "http://127.0.0.1:8082",
    "grpc_inference_address": "127.0.0.1",
    "grpc_management_address": "127.0.0.1",
    "grpc_inference_port": "7070",
    "grpc_management_port": "7071",
    "default_response_timeout": "120",
    "max_request_size": "6553500",
}
USED = frozenset({
    *DEFAULTS, "model_store", "load_models", "models", "default_workers_per_model",
    "disable_token_authorization", "enable_model_api", "service_envelope",
})  # fmt: skip
_REFUSED = {
    "keystore": "TLS from a Java keystore: convert it to PEM and pass --ssl-certfile/--ssl-keyfile",
    "certificate_file": "TLS: pass the same files as --ssl-certfile/--ssl-keyfile",
    "private_key_file": "TLS: pass the same files as --ssl-certfile/--ssl-keyfile",
    "enable_grpc_ssl": "gRPC TLS: pass --grpc-use-ssl with --grpc-server-cert/--grpc-server-key",
}
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_SEPARATOR = re.compile(r"(?<!\\)[=:]|(?<!\\)\s")


@dataclass(frozen=True)
class Address:
    """Host and port of one TorchServe listener."""

    host: str
    port: int


@dataclass
class TorchServeProperties:
    """What servelab takes from a config.properties; ``folder`` resolves relative paths (TorchServe: the cwd)."""

    values: dict[str, str]
    folder: Path
    source: str = "config.properties"
    ignored: list[str] = field(default_factory=list)

    def get(self, key: str) -> str | None:
        return self.values.get(key, DEFAULTS.get(key))

    def address(self, key: str) -> Address:
        """``inference_address`` etc.: ``http://host:port`` (https is refused: servelab's TLS flags do that)."""
        raw = self.get(key) or ""
        parsed = urllib.parse.urlsplit(raw if "//" in raw else f"http://{raw}")
        if parsed.scheme == "https":
            raise InvalidArgument(
                f"{self.source}: {key}={raw} is HTTPS; serve TLS with --ssl-certfile/--ssl-keyfile and an http:// address"
            )
        if parsed.scheme not in ("http", "") or parsed.port is None or not parsed.hostname:
            raise InvalidArgument(f"{self.source}: {key}={raw!r} is not an address; expected http://host:port")
        return Address(parsed.hostname, parsed.port)

    def grpc_address(self, kind: str) -> Address:
        host = self.get(f"grpc_{kind}_address") or "127.0.0.1"
        return Address(host, self.integer(f"grpc_{kind}_port", minimum=0))

    def integer(self, key: str, minimum: int = 1) -> int:
        raw = self.get(key)
        try:
            value = int(raw or "")
        except ValueError:
            raise InvalidArgument(f"{self.source}: {key}={raw!r} must be an integer") from None
        if value < minimum:
            raise InvalidArgument(f"{self.source}: {key}={value} must be >= {minimum}")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        raw = self.values.get(key)
        return default if raw is None else raw.strip().lower() == "true"

    @property
    def model_store(self) -> Path | None:
        raw = self.values.get("model_store")
        return (self.folder / raw).resolve() if raw else None

    @property
    def load_models(self) -> list[str]:
        """``load_models``: ``all``, or comma-separated ``[name=]archive`` entries ([] = none)."""
        raw = self.values.get("load_models", "")
        return [item.strip() for item in raw.split(",") if item.strip()]

    @property
    def default_workers(self) -> int | None:
        return self.integer("default_workers_per_model", minimum=0) if "default_workers_per_model" in self.values else None

    def models(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``models={...}``: model -> version -> settings (TorchServe's JSON, checked for shape)."""
        raw = self.values.get("models")
        if not raw:
            return {}
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise InvalidArgument(f"{self.source}: 'models' is not JSON ({exc}); expected "
                                  '{"model": {"1.0": {"minWorkers": 1, ...}}}') from None
        if not isinstance(data, dict) or not all(
            isinstance(v, dict) and all(isinstance(s, dict) for s in v.values()) for v in data.values()
        ):
            raise InvalidArgument(f"{self.source}: 'models' must map model -> version -> settings objects")
        return data


def _logical_lines(text: str) -> list[str]:
    """Java's logical lines: comments dropped, backslash continuations joined (leading blanks stripped)."""
    lines: list[str] = []
    pending = ""
    for physical in text.splitlines():
        line = physical.lstrip() if pending else physical.strip()
        if not pending and (not line or line.startswith(("#", "!"))):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        lines.append(pending + line)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def _unescape(text: str) -> str:
    out = []
    chars = iter(text)
    for c in chars:
        if c != "\\":
            out.append(c)
            continue
        nxt = next(chars, "")
        if nxt == "u":
            code = "".join(next(chars, "") for _ in range(4))
            out.append(chr(int(code, 16)) if re.fullmatch(r"[0-9a-fA-F]{4}", code) else "u" + code)
        else:
            out.append(_ESCAPES.get(nxt, nxt))
    return "".join(out)


def parse_properties(text: str, folder: Path, source: str = "config.properties") -> TorchServeProperties:
    """Parse properties text; refuses keys servelab cannot honour in the same way (TLS keystores)."""
    values: dict[str, str] = {}
    for line in _logical_lines(text):
        match = _SEPARATOR.search(line)
        key, value = (line[: match.start()], line[match.end():]) if match else (line, "")
        value = value.lstrip()
        if match and match.group().isspace() and value[:1] in ("=", ":"):
            value = value[1:].lstrip()
        values[_unescape(key.strip())] = _unescape(value)
    for key, why in _REFUSED.items():
        if key in values and (key != "enable_grpc_ssl" or values[key].strip().lower() == "true"):
            raise InvalidArgument(f"{source}: {key} is set; servelab does not read it. {why}")
    ignored = sorted(k for k in values if k not in USED)
    return TorchServeProperties(values, folder, source, ignored)


def read_properties(path: Path) -> TorchServeProperties:
    """Read ``config.properties``; relative paths in it resolve against the current directory, as in
    TorchServe (which resolves them against the folder it was started in)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InvalidArgument(f"TorchServe config {path}: cannot read it: {exc.strerror}") from None
    return parse_properties(text, Path(os.getcwd()), source=str(path))
