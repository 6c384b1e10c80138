"""Request senders, one per target kind: the HTTP ones here, gRPC and in-process in their own modules
(all on :class:`~servelab.bench.client_base.Client`), and :func:`make_client` to pick one.
"""

from __future__ import annotations

import aiohttp
import orjson

from servelab.bench import _encode
from servelab.bench.client_base import Client, RequestFailed
from servelab.bench.inputs import Request
from servelab.bench.specs import TargetSpec
from servelab.errors import InvalidArgument

__all__ = ["Client", "OipHttpClient", "RequestFailed", "TfServingClient", "TorchServeClient", "make_client"]


class _HttpClient(Client):
    """Shared aiohttp plumbing: one keep-alive session, a POST per request."""

    def __init__(self, target: TargetSpec, model: str, max_inflight: int) -> None:
        super().__init__(target, model, max_inflight)
        self._session: aiohttp.ClientSession | None = None
        self._bodies: list[tuple[bytes, dict[str, str]]] = []
        self._url = ""

    @property
    def n_prepared(self) -> int:
        return len(self._bodies)

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=self.max_inflight, force_close=False, ttl_dns_cache=None)
        timeout = aiohttp.ClientTimeout(total=self.target.timeout_s)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=timeout, skip_auto_headers=("User-Agent",)
        )

    async def send(self, index: int) -> None:
        assert self._session is not None, "start() must be awaited before send()"
        body, headers = self._bodies[index]
        try:
            async with self._session.post(self._url, data=body, headers=headers) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RequestFailed(f"http_{resp.status}")
        except TimeoutError as exc:
            raise RequestFailed("timeout") from exc
        except aiohttp.ClientConnectionError as exc:
            raise RequestFailed("connection", str(exc)) from exc
        except aiohttp.ClientError as exc:
            raise RequestFailed("http_client", type(exc).__name__) from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class OipHttpClient(_HttpClient):
    """Open Inference Protocol over HTTP: binary tensor extension by default, JSON on request."""

    def prepare(self, requests: list[Request]) -> None:
        version = f"/versions/{self.target.model_version}" if self.target.model_version else ""
        self._url = f"{self.target.http_base()}/v2/models/{self.model}{version}/infer"
        self._bodies = []
        for r in requests:
            if self.target.binary:
                body, n = _encode.oip_binary_body(r)
                headers = {
                    "Inference-Header-Content-Length": str(n),
                    "Content-Type": "application/octet-stream",
                }
            else:
                body, headers = _encode.oip_json_body(r), {"Content-Type": "application/json"}
            self._bodies.append((body, headers))


class TorchServeClient(_HttpClient):
    """TorchServe ``POST /predictions/{m}``: a raw file body, or JSON ``{name: nested list}``."""

    def prepare(self, requests: list[Request]) -> None:
        version = f"/{self.target.model_version}" if self.target.model_version else ""
        self._url = f"{self.target.http_base()}/predictions/{self.model}{version}"
        self._bodies = []
        for r in requests:
            raw = _encode.raw_bytes(r)
            if raw is not None:
                self._bodies.append((raw, {"Content-Type": "application/octet-stream"}))
            else:
                body = orjson.dumps({n: a.tolist() for n, a in r.items()}, option=orjson.OPT_SERIALIZE_NUMPY)
                self._bodies.append((body, {"Content-Type": "application/json"}))


class TfServingClient(_HttpClient):
    """TF Serving REST ``POST /v1/models/{m}:predict`` in the columnar ``inputs`` format."""

    def prepare(self, requests: list[Request]) -> None:
        version = f"/versions/{self.target.model_version}" if self.target.model_version else ""
        self._url = f"{self.target.http_base()}/v1/models/{self.model}{version}:predict"
        self._bodies = [(_encode.tfserving_body(r), {"Content-Type": "application/json"}) for r in requests]


def make_client(target: TargetSpec, model: str, max_inflight: int) -> Client:
    """The client for ``target.kind``; gRPC and in-process clients are imported lazily."""
    if target.kind == "oip-http":
        return OipHttpClient(target, model, max_inflight)
    if target.kind == "torchserve":
        return TorchServeClient(target, model, max_inflight)
    if target.kind == "tfserving":
        return TfServingClient(target, model, max_inflight)
    if target.kind == "oip-grpc":
        from servelab.bench._grpc_client import OipGrpcClient

        return OipGrpcClient(target, model, max_inflight)
    if target.kind == "inprocess":
        from servelab.bench._inprocess_client import InProcessClient

        return InProcessClient(target, model, max_inflight)
    raise InvalidArgument(f"unknown target kind {target.kind!r}")
