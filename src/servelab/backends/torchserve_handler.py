"""TorchServe handlers, run by TorchServe's own Python library (the ``ts`` package of ``torchserve==0.12.0``).

A model version is an unarchived TorchServe model folder (``MAR-INF/MANIFEST.json``, the serialized
file, the handler, extra files, ``model-config.yaml``). Loading does what TorchServe's worker does:
the folder becomes the working directory and the front of ``sys.path``, and
``ts.model_loader.TsModelLoader`` imports the handler (a built-in name such as ``image_classifier``, a
``handler.py`` with a ``BaseHandler`` subclass, or ``module:function``), builds the ``Context``
(manifest, ``system_properties`` with ``model_dir`` and ``batch_size``, ``model_yaml_config``) and
calls ``initialize(context)``. Each batch the scheduler hands over is turned into the frames
TorchServe's frontend would send (:mod:`._torchserve_otf`) and run through ``Service.predict``, so
request decoding (JSON and text bodies), ``handle(data, context)``, error codes ("Prediction
failed"), per-request statuses, content types and headers, and streamed intermediate responses are
TorchServe's own. Requests and answers are the tensors of :mod:`servelab.protocol.torchserve_envelope`.

The instances must be worker processes (the repository sets ``instance_mode: process``): a handler
owns its process's working directory, ``sys.path`` and module names, as in TorchServe. Handler
metrics (``context.metrics``) are kept by ``ts`` but not exported; TorchServe's frontend metrics are
(servelab.metrics.torchserve).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import uuid
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from servelab.backends._torchserve_otf import BufferConnection, WorkerResponse, encode_batch, parse_response
from servelab.backends.base import Backend, BackendContext, Inputs, Outputs
from servelab.backends.parameters import TorchServeHandlerParameters
from servelab.errors import InvalidArgument, ServelabError, Unsupported
from servelab.protocol.torchserve_envelope import BODY, REQUEST, STREAM_HEADER, TsRequest, TsResponse

__all__ = ["MANIFEST", "TorchServeHandlerBackend"]

log = logging.getLogger("servelab.torchserve")

MANIFEST = Path("MAR-INF") / "MANIFEST.json"
_EXTRA = "pip install 'servelab[torchserve]' (TorchServe's handler library, torchserve==0.12.0)"


def _import_ts() -> Any:
    try:
        return importlib.import_module("ts.model_loader")
    except ImportError as exc:
        raise Unsupported(f"backend 'torchserve_handler' needs the 'ts' package ({exc}); {_EXTRA}") from exc


class _Sink:
    """The handler's ``context.cl_socket``: streamed (intermediate) responses are kept for the batch."""

    def __init__(self) -> None:
        self.messages: list[bytes] = []

    def sendall(self, data: bytes | bytearray) -> None:
        self.messages.append(bytes(data))


class TorchServeHandlerBackend(Backend):
    """One TorchServe model version (an unarchived model folder) served by its handler."""

    kind: ClassVar[str] = "torchserve_handler"
    platforms: ClassVar[tuple[str, ...]] = ()
    default_filename: ClassVar[str] = ""
    releases_gil: ClassVar[bool] = False

    def __init__(self, ctx: BackendContext) -> None:
        super().__init__(ctx)
        self.params = TorchServeHandlerParameters.read(ctx.config)
        self.service: Any = None
        self._sink = _Sink()

    def load(self) -> None:
        loader = _import_ts()
        model_dir = self.ctx.version_dir.resolve()
        manifest = _read_manifest(model_dir)
        model = manifest.get("model", {})
        handler = self.params.handler or model.get("handler", "")
        envelope = self.params.envelope  # TorchServe: service_envelope of config.properties (the manifest's is replaced)
        if not handler:
            raise InvalidArgument(f"model '{self.ctx.model_name}': {MANIFEST} names no handler")
        sys.path[:] = [os.path.abspath(p) for p in sys.path if p]  # relative entries would move with the cwd
        os.chdir(model_dir)  # TorchServe starts its worker in the model folder, with it on the path
        sys.path.insert(0, str(model_dir))
        metrics = _metrics_cache(self.ctx.model_name)
        batch_size = max(1, self.config.max_batch_size)
        try:
            self.service = loader.TsModelLoader().load(
                self.ctx.model_name, str(model_dir), handler, None, batch_size, envelope,
                True, metrics,
            )  # fmt: skip
        except ServelabError:
            raise
        except Exception as exc:
            raise InvalidArgument(
                f"model '{self.ctx.model_name}': TorchServe could not load handler {handler!r}: {exc!r}"
            ) from exc
        self.service.set_cl_socket(self._sink)

    def infer(self, inputs: Inputs) -> Outputs:
        result = self.execute([inputs])[0]
        if isinstance(result, ServelabError):
            raise result
        return result

    def execute(self, requests: list[Inputs]) -> list[Outputs | ServelabError]:
        """Every row of every request is one TorchServe request; the batch goes to the handler at once."""
        rows: list[tuple[int, str, TsRequest]] = []
        results: list[Outputs | ServelabError] = [{} for _ in requests]
        for index, inputs in enumerate(requests):
            try:
                rows.extend((index, str(uuid.uuid4()), r) for r in _requests_of(inputs))
            except ServelabError as exc:
                results[index] = exc
        if not rows:
            return results
        answers = self._predict([(rid, req) for _, rid, req in rows])
        per_request: dict[int, list[TsResponse]] = {}
        for index, rid, _ in rows:
            per_request.setdefault(index, []).append(answers[rid])
        for index, responses in per_request.items():
            results[index] = _stack([r.to_outputs() for r in responses])
        return results

    def unload(self) -> None:
        self.service = None

    # ----- one batch through TorchServe's Service -----
    def _predict(self, batch: list[tuple[str, TsRequest]]) -> dict[str, TsResponse]:
        otf = importlib.import_module("ts.protocol.otf_message_handler")
        frames = BufferConnection(encode_batch(batch))
        frames.recv(1)  # the b"I" command: read the requests as retrieve_msg does, without its log line per batch
        message = otf._retrieve_inference_msg(frames)
        self._sink.messages.clear()
        final = parse_response(self.service.predict(message))
        streamed = [parse_response(m) for m in self._sink.messages]
        self._sink.messages.clear()
        return {rid: _answer(rid, streamed, final) for rid, _ in batch}


def _read_manifest(model_dir: Path) -> dict[str, Any]:
    path = model_dir / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidArgument(f"{MANIFEST} of the model cannot be read as JSON: {exc}") from None
    if not isinstance(manifest, dict):
        raise InvalidArgument(f"{MANIFEST} must hold a JSON object")
    return manifest


def _metrics_cache(model_name: str) -> Any:
    """TorchServe's metrics cache from its default metrics.yaml (handlers call ``context.metrics``)."""
    module = importlib.import_module("ts.metrics.metric_cache_yaml_impl")
    configs = Path(importlib.import_module("ts").__file__ or ".").parent / "configs" / "metrics.yaml"
    cache = module.MetricsCacheYamlImpl(config_file_path=str(configs))
    cache.initialize_cache()
    cache.model_name = model_name
    logging.getLogger("ts.metrics").setLevel(logging.WARNING)  # one log line per metric and request
    return cache


def _requests_of(inputs: Inputs) -> list[TsRequest]:
    body = inputs[BODY]
    meta = inputs.get(REQUEST)
    if body.ndim != 2 or (meta is not None and meta.shape[0] != body.shape[0]):
        raise InvalidArgument(f"inputs '{BODY}' and '{REQUEST}' must have one row per TorchServe request")
    return [TsRequest.from_row(body[i], None if meta is None else meta[i]) for i in range(body.shape[0])]


def _answer(request_id: str, streamed: list[WorkerResponse], final: WorkerResponse) -> TsResponse:
    """One request's answer: the streamed parts, then the final one (TorchServe's frontend order)."""
    parts: list[bytes] = []
    first = None
    for message in [*streamed, final]:
        if message.code != 200:
            return TsResponse([b""], message.code, "", "", {}, message.message or "Prediction failed")
        for p in message.predictions:
            if p.request_id == request_id:
                parts.append(p.value)
                first = first or p
    if first is None:
        return TsResponse([b""], 503, "", "", {}, "the handler gave no answer for this request")
    headers = dict(first.headers)
    if len(parts) > 1:
        headers.setdefault(STREAM_HEADER, "true")
    return TsResponse(parts, first.status, first.phrase, first.content_type, headers)


def _stack(rows: list[Outputs]) -> Outputs:
    """Per-row outputs of one request stacked on the batch axis (parts padded with empty bytes)."""
    if len(rows) == 1:
        return rows[0]
    out: Outputs = {}
    for name in rows[0]:
        width = max(r[name].shape[1] for r in rows)
        stacked = np.empty((len(rows), width), dtype=object)
        stacked[:] = b""
        for i, r in enumerate(rows):
            stacked[i, : r[name].shape[1]] = r[name][0]
        out[name] = stacked
    return out
