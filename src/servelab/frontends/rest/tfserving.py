"""TensorFlow Serving's REST API over the same data plane: model status, metadata and predict.

- ``GET /v1/models/{m}[/versions/{v}]``: ``model_version_status`` for every (or that) version.
- ``GET /v1/models/{m}[/versions/{v}]/metadata``: a ``serving_default`` signature_def built from the
  model's inputs and outputs (dtype ``DT_*``, dims as strings, -1 variable).
- ``POST /v1/models/{m}[/versions/{v}]:predict``: row format ``{"instances": [...]}`` (one entry per
  example: a value for a single-input model, else ``{input: value}``) answered with ``predictions``;
  columnar ``{"inputs": value | {input: value}}`` answered with ``outputs``. ``signature_name`` may be
  ``serving_default`` (or absent). Binary values are ``{"b64": "..."}``; BYTES outputs whose names end
  in ``_bytes`` come back as ``{"b64": ...}``, others as UTF-8 text. Version labels are not supported.
Errors are ``{"error": "..."}`` as in TF Serving.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from servelab.config.settings import LimitSettings
from servelab.errors import InvalidArgument, NotFound, Unsupported
from servelab.frontends.rest._body import off_loop_if_large, read_body
from servelab.frontends.rest._common import dataplane, json_response, settings
from servelab.frontends.rest._oip_codec import parse_json_object
from servelab.frontends.rest._values import tensor_from_value
from servelab.types import DataType, InferRequest, InferResponse, Tensor

__all__ = ["routes"]

SIGNATURE = "serving_default"
_TF_DTYPES = {
    DataType.BOOL: "DT_BOOL", DataType.UINT8: "DT_UINT8", DataType.UINT16: "DT_UINT16",
    DataType.UINT32: "DT_UINT32", DataType.UINT64: "DT_UINT64", DataType.INT8: "DT_INT8",
    DataType.INT16: "DT_INT16", DataType.INT32: "DT_INT32", DataType.INT64: "DT_INT64",
    DataType.FP16: "DT_HALF", DataType.FP32: "DT_FLOAT", DataType.FP64: "DT_DOUBLE",
    DataType.BF16: "DT_BFLOAT16", DataType.BYTES: "DT_STRING",
}
_STATES = {"READY": "AVAILABLE", "LOADING": "LOADING", "UNLOADING": "UNLOADING", "UNAVAILABLE": "END"}


def _parse_path(path: str) -> tuple[str, str, str]:
    """``m[/versions/v][/metadata|:verb]`` -> (model, version, action)."""
    action = ""
    if ":" in path:
        path, _, action = path.rpartition(":")
    parts = path.split("/")
    if parts and parts[-1] == "metadata" and not action:
        action, parts = "metadata", parts[:-1]
    if len(parts) == 3 and parts[1] == "labels":
        raise NotFound(f"version labels are not supported (asked for label {parts[2]!r}); use /versions/<n>")
    if len(parts) == 3 and parts[1] == "versions":
        return parts[0], parts[2], action
    if len(parts) == 1 and parts[0]:
        return parts[0], "", action
    raise NotFound(f"no route for /v1/models/{path}; expected /v1/models/<name>[/versions/<n>][/metadata|:predict]")


async def get_model(request: Request) -> Response:
    name, version, action = _parse_path(request.path_params["path"])
    if action == "metadata":
        return json_response(_metadata(request, name, version))
    if action:
        raise NotFound(f"GET does not take ':{action}'; POST to :predict")
    rows = [r for r in dataplane(request).repository_index() if r["name"] == name]
    if version:
        rows = [r for r in rows if r["version"] == version]
    if not rows:
        raise NotFound(f"Servable not found for request: {'Specific(' + name + ', ' + version + ')' if version else 'Latest(' + name + ')'}")
    status = [
        {
            "version": r["version"] or "0",
            "state": _STATES.get(r["state"], "UNKNOWN"),
            "status": {"error_code": "OK" if r["state"] == "READY" else "UNAVAILABLE", "error_message": r["reason"]},
        }
        for r in rows
    ]
    return json_response({"model_version_status": status})


def _tensor_info(meta: dict[str, Any]) -> dict[str, Any]:
    dims = [{"size": str(d), "name": ""} for d in meta["shape"]]
    return {"dtype": _TF_DTYPES[DataType(meta["datatype"])], "tensor_shape": {"dim": dims, "unknown_rank": False},
            "name": meta["name"]}


def _metadata(request: Request, name: str, version: str) -> dict[str, Any]:
    meta = dataplane(request).model_metadata(name, version)
    signature = {
        "inputs": {m["name"]: _tensor_info(m) for m in meta["inputs"]},
        "outputs": {m["name"]: _tensor_info(m) for m in meta["outputs"]},
        "method_name": "tensorflow/serving/predict",
    }
    return {
        "model_spec": {"name": name, "signature_name": "", "version": version or meta["versions"][-1]},
        "metadata": {"signature_def": {"signature_def": {SIGNATURE: signature}}},
    }


def _row_inputs(instances: Any, inputs: list[dict[str, Any]]) -> dict[str, Any]:
    if not isinstance(instances, list) or not instances:
        raise InvalidArgument("'instances' must be a non-empty list with one entry per example")
    names = [m["name"] for m in inputs]
    if all(isinstance(i, dict) and "b64" not in i for i in instances):
        columns: dict[str, list[Any]] = {n: [] for n in names}
        for k, inst in enumerate(instances):
            if set(inst) != set(names):
                raise InvalidArgument(f"instances[{k}] has keys {sorted(inst)}; expected the inputs {sorted(names)}")
            for n in names:
                columns[n].append(inst[n])
        return columns
    if len(names) != 1:
        raise InvalidArgument(f"the model has inputs {names}: each instance must be an object naming them")
    return {names[0]: instances}


def _columnar_inputs(value: Any, inputs: list[dict[str, Any]]) -> dict[str, Any]:
    names = [m["name"] for m in inputs]
    if isinstance(value, dict) and "b64" not in value:
        if set(value) != set(names):
            raise InvalidArgument(f"'inputs' has keys {sorted(value)}; expected the inputs {sorted(names)}")
        return value
    if len(names) != 1:
        raise InvalidArgument(f"the model has inputs {names}: 'inputs' must be an object naming them")
    return {names[0]: value}


def _out_value(t: Tensor) -> Any:
    if t.datatype is DataType.BYTES:
        flat = [
            {"b64": base64.b64encode(b).decode()} if t.name.endswith("_bytes") else b.decode("utf-8", "replace")
            for b in t.data.reshape(-1)
        ]
        return np.array(flat, dtype=object).reshape(t.data.shape).tolist()
    if t.datatype in (DataType.FP16, DataType.BF16):
        return t.data.astype(np.float32)
    return t.data


def _predictions(response: InferResponse, row: bool) -> dict[str, Any]:
    values = {t.name: _out_value(t) for t in response.outputs}
    if not row:
        return {"outputs": next(iter(values.values())) if len(values) == 1 else values}
    if len(values) == 1:
        return {"predictions": next(iter(values.values()))}
    rows = min(len(v) for v in values.values())
    return {"predictions": [{n: v[i] for n, v in values.items()} for i in range(rows)]}


async def predict(request: Request) -> Response:
    name, version, action = _parse_path(request.path_params["path"])
    if action in ("classify", "regress"):
        raise Unsupported(f":{action} is not supported; use :predict")
    if action != "predict":
        raise NotFound(f"POST needs ':predict' after the model (got {request.url.path})")
    limits = settings(request).limits
    raw = await read_body(request, limits.max_body_bytes)
    dp = dataplane(request)
    meta = dp.model_metadata(name, version)
    tensors, row = await off_loop_if_large(len(raw), limits.offload_decode_bytes, _decode, raw, meta, limits)
    response = await dp.infer_async(InferRequest(name, tensors, version))
    return json_response(_predictions(response, row))


def _decode(raw: bytes | bytearray, meta: dict[str, Any], limits: LimitSettings) -> tuple[list[Tensor], bool]:
    """(input tensors, row format?) of a predict body."""
    body = parse_json_object(raw, "predict request")
    signature = body.get("signature_name", SIGNATURE)
    if signature not in (SIGNATURE, ""):
        raise InvalidArgument(f"unknown signature_name {signature!r:.80}; this model has only {SIGNATURE!r}")
    if ("instances" in body) == ("inputs" in body):
        raise InvalidArgument("the request must have exactly one of 'instances' (row format) or 'inputs' (columnar)")
    row = "instances" in body
    values = _row_inputs(body["instances"], meta["inputs"]) if row else _columnar_inputs(body["inputs"], meta["inputs"])
    types = {m["name"]: DataType(m["datatype"]) for m in meta["inputs"]}
    return [tensor_from_value(n, types[n], v, limits) for n, v in values.items()], row


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/models/{path:path}", get_model, methods=["GET"]),
        Route("/v1/models/{path:path}", predict, methods=["POST"]),
    ]
