"""TensorFlow Serving's REST API over the same data plane: status, metadata, predict, classify, regress.

``/v1/models/{m}[/versions/{v}|/labels/{l}]`` then:

- ``GET``: ``model_version_status`` of every (or that) version; ``GET .../metadata``: the
  ``signature_def`` of every signature (TF Serving's GetModelMetadata as JSON).
- ``POST ...:predict``: row format ``{"instances": [...]}`` (one entry per example: a value for a
  single-input signature, else ``{input: value}``) answered with ``predictions``; columnar
  ``{"inputs": value | {input: value}}`` answered with ``outputs``. Binary values are
  ``{"b64": "..."}``; DT_STRING outputs whose names end in ``_bytes`` come back as ``{"b64": ...}``.
- ``POST ...:classify`` / ``:regress``: ``{"examples": [{feature: value}], "context": {...}}`` answered
  with ``{"results": [[[label, score], ...], ...]}`` / ``{"results": [value, ...]}``.

``signature_name`` picks the signature (default ``serving_default``). Errors are ``{"error": "..."}``
as in TF Serving. The translation shared with the gRPC services is :mod:`servelab.frontends.tfserving`.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
from google.protobuf import json_format
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from servelab.config.settings import LimitSettings
from servelab.errors import InvalidArgument, NotFound
from servelab.frontends.rest._body import off_loop_if_large, read_body
from servelab.frontends.rest._common import dataplane, json_response, settings
from servelab.frontends.rest._oip_codec import parse_json_object
from servelab.frontends.rest._values import tensor_from_value
from servelab.frontends.tfserving import (
    Catalog,
    SignatureView,
    Target,
    classify,
    predict,
    regress,
)
from servelab.frontends.tfserving.examples import examples_from_json
from servelab.trust import check_version
from servelab.types import DataType

__all__ = ["routes"]

_VERBS = ("predict", "classify", "regress")


def _catalog(request: Request) -> Catalog:
    """The app's catalog, made on first use (it only caches parsed configs of the data plane)."""
    state = request.app.state
    catalog: Catalog | None = getattr(state, "tfserving_catalog", None)
    if catalog is None:
        catalog = state.tfserving_catalog = Catalog(dataplane(request))
    return catalog


def _parse_path(path: str) -> tuple[str, str, str, str]:
    """``m[/versions/v|/labels/l][/metadata|:verb]`` -> (model, version, label, action)."""
    action = ""
    if ":" in path:
        path, _, action = path.rpartition(":")
    parts = path.split("/")
    if parts and parts[-1] == "metadata" and not action:
        action, parts = "metadata", parts[:-1]
    if len(parts) == 1 and parts[0]:
        return parts[0], "", "", action
    if len(parts) == 3 and parts[1] == "versions" and parts[2]:
        return parts[0], check_version(parts[2]), "", action
    if len(parts) == 3 and parts[1] == "labels" and parts[2]:
        return parts[0], "", parts[2], action
    raise NotFound(f"no route for /v1/models/{path}; expected "
                   "/v1/models/<name>[/versions/<n>|/labels/<label>][/metadata|:predict|:classify|:regress]")


async def get_model(request: Request) -> Response:
    name, version, label, action = _parse_path(request.path_params["path"])
    catalog = _catalog(request)
    if action == "metadata":
        return json_response(_metadata(catalog, name, version, label))
    if action:
        raise NotFound(f"GET does not take ':{action}'; POST to :predict, :classify or :regress")
    status = [
        {"version": str(s.version), "state": s.state,
         "status": {"error_code": s.error_code, "error_message": s.error_message}}
        for s in catalog.status(name, version, label)
    ]
    return json_response({"model_version_status": status})


def _metadata(catalog: Catalog, name: str, version: str, label: str) -> dict[str, Any]:
    version = catalog.version(name, version, label)
    signatures = catalog.signature_def_map(name, version)
    return {
        "model_spec": {"name": name, "signature_name": "", "version": version},
        "metadata": {"signature_def": json_format.MessageToDict(
            signatures, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)},
    }


async def post_model(request: Request) -> Response:
    name, version, label, action = _parse_path(request.path_params["path"])
    if action not in _VERBS:
        raise NotFound(f"POST needs ':predict', ':classify' or ':regress' after the model (got {request.url.path})")
    limits = settings(request).limits
    raw = await read_body(request, limits.max_body_bytes)
    body = await off_loop_if_large(len(raw), limits.offload_decode_bytes, parse_json_object, raw, f"{action} request")
    signature = body.get("signature_name") or ""
    if not isinstance(signature, str):
        raise InvalidArgument(f"'signature_name' must be a string; got {type(signature).__name__}")
    catalog = _catalog(request)
    target = catalog.resolve(name, version, label, signature)
    if action == "predict":
        return json_response(await _predict(catalog, target, body, limits, len(raw), request))
    examples = examples_from_json(body)
    if action == "classify":
        _, classes = await classify(catalog, target, examples, request.headers)
        return json_response({"results": [[[label_, score] for label_, score in row] for row in classes]})
    _, values = await regress(catalog, target, examples, request.headers)
    return json_response({"results": values})


async def _predict(
    catalog: Catalog, target: Target, body: dict[str, Any], limits: LimitSettings, size: int, request: Request
) -> dict[str, Any]:
    # a large body converts in a worker thread, as it was parsed: the loop stays free for small requests
    arrays, row = await off_loop_if_large(size, limits.offload_decode_bytes, _predict_arrays, body, target.signature, limits)
    _, outputs = await predict(catalog, target, arrays, headers=request.headers)
    return _predictions(outputs, row)


def _decode_predict(raw: bytes, sig: SignatureView, limits: LimitSettings) -> tuple[dict[str, np.ndarray], bool]:
    """A predict body as the signature's input arrays, and whether it was the row format."""
    return _predict_arrays(parse_json_object(raw, "predict request"), sig, limits)


def _predict_arrays(
    body: dict[str, Any], sig: SignatureView, limits: LimitSettings
) -> tuple[dict[str, np.ndarray], bool]:
    """(the signature's input arrays, row format?) of a parsed predict body, shapes checked against the limits."""
    if ("instances" in body) == ("inputs" in body):
        raise InvalidArgument("the request must have exactly one of 'instances' (row format) or 'inputs' (columnar)")
    row = "instances" in body
    values = _row_inputs(body["instances"], sig) if row else _columnar_inputs(body["inputs"], sig)
    arrays = {key: tensor_from_value(key, sig.inputs[key].datatype, value, limits).data for key, value in values.items()}
    return arrays, row


def _row_inputs(instances: Any, sig: SignatureView) -> dict[str, Any]:
    if not isinstance(instances, list) or not instances:
        raise InvalidArgument("'instances' must be a non-empty list with one entry per example")
    names = sorted(sig.inputs)
    if all(isinstance(i, dict) and "b64" not in i for i in instances):
        columns: dict[str, list[Any]] = {n: [] for n in names}
        for k, inst in enumerate(instances):
            if set(inst) != set(names):
                raise InvalidArgument(f"instances[{k}] has keys {sorted(inst)}; expected the inputs {names}")
            for n in names:
                columns[n].append(inst[n])
        return columns
    if len(names) != 1:
        raise InvalidArgument(f"signature {sig.key!r} has inputs {names}: each instance must be an object naming them")
    return {names[0]: instances}


def _columnar_inputs(value: Any, sig: SignatureView) -> dict[str, Any]:
    names = sorted(sig.inputs)
    if isinstance(value, dict) and "b64" not in value:
        if set(value) != set(names):
            raise InvalidArgument(f"'inputs' has keys {sorted(value)}; expected the inputs {names}")
        return value
    if len(names) != 1:
        raise InvalidArgument(f"signature {sig.key!r} has inputs {names}: 'inputs' must be an object naming them")
    return {names[0]: value}


def _out_value(name: str, array: np.ndarray) -> Any:
    if array.dtype == object:
        as_b64 = name.endswith("_bytes")
        flat = [{"b64": base64.b64encode(b).decode()} if as_b64 else b.decode("utf-8", "replace")
                for b in array.reshape(-1)]
        return np.array(flat, dtype=object).reshape(array.shape).tolist()
    if DataType.from_numpy(array.dtype) in (DataType.FP16, DataType.BF16):
        return array.astype(np.float32)
    return array


def _predictions(outputs: dict[str, np.ndarray], row: bool) -> dict[str, Any]:
    values = {name: _out_value(name, array) for name, array in outputs.items()}
    if not row:
        return {"outputs": next(iter(values.values())) if len(values) == 1 else values}
    if len(values) == 1:
        return {"predictions": next(iter(values.values()))}
    batch = {name: len(array) if np.ndim(array) else 0 for name, array in outputs.items()}
    if len(set(batch.values())) != 1 or 0 in batch.values():
        raise InvalidArgument(f"outputs have different batch sizes {batch}: ask in columnar format ('inputs')")
    rows = next(iter(batch.values()))
    return {"predictions": [{n: v[i] for n, v in values.items()} for i in range(rows)]}


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/models/{path:path}", get_model, methods=["GET"]),
        Route("/v1/models/{path:path}", post_model, methods=["POST"]),
    ]
