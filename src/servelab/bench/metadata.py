"""Model input metadata from the target: OIP ``GET /v2/models/{m}``, gRPC ModelMetadata, or the ONNX file."""

from __future__ import annotations

import aiohttp

from servelab.bench.inputs import TensorMeta
from servelab.bench.specs import TargetSpec
from servelab.errors import InvalidArgument, NotFound, Unavailable

__all__ = ["fetch_input_metas"]


async def _http_metas(target: TargetSpec, model: str) -> list[TensorMeta]:
    version = f"/versions/{target.model_version}" if target.model_version else ""
    url = f"{target.http_base()}/v2/models/{model}{version}"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10.0)) as session,
            session.get(url) as resp,
        ):
            if resp.status == 404:
                raise NotFound(f"model {model!r} not found at {url} (HTTP 404)")
            if resp.status != 200:
                raise Unavailable(f"GET {url} answered HTTP {resp.status}: {(await resp.text())[:200]}")
            doc = await resp.json(content_type=None)
    except aiohttp.ClientError as exc:
        raise Unavailable(f"cannot reach {url}: {exc}") from exc
    try:
        return [
            TensorMeta(i["name"], i["datatype"], tuple(int(d) for d in i["shape"])) for i in doc["inputs"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"{url}: metadata lacks inputs[].name/datatype/shape: {str(doc)[:200]}"
        ) from exc


async def _grpc_metas(target: TargetSpec, model: str) -> list[TensorMeta]:
    import grpc
    import grpc.aio

    from servelab.protocol import grpc_service_pb2, grpc_service_pb2_grpc

    async with grpc.aio.insecure_channel(target.grpc_address()) as channel:
        stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
        req = grpc_service_pb2.ModelMetadataRequest(name=model, version=target.model_version)
        try:
            meta = await stub.ModelMetadata(req, timeout=10.0)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                raise NotFound(
                    f"model {model!r} not found at {target.grpc_address()}: {exc.details()}"
                ) from exc
            raise Unavailable(
                f"gRPC ModelMetadata at {target.grpc_address()} failed: {exc.code().name}"
            ) from exc
    return [TensorMeta(i.name, i.datatype, tuple(int(d) for d in i.shape)) for i in meta.inputs]


async def fetch_input_metas(target: TargetSpec, model: str) -> list[TensorMeta]:
    """The model's inputs; empty for TorchServe / TF Serving (which need ``--input-data``)."""
    if target.kind == "oip-http":
        return await _http_metas(target, model)
    if target.kind == "oip-grpc":
        return await _grpc_metas(target, model)
    if target.kind == "inprocess":
        from servelab.bench._inprocess_client import onnx_input_metas, open_session

        return onnx_input_metas(open_session(target.url, intra_op_threads=1))
    return []
