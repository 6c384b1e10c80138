"""TorchServe's predictions over the data plane, shared by its REST door and its gRPC service.

A model on the ``torchserve_handler`` backend (a TorchServe archive) is called with one
:class:`~servelab.protocol.torchserve_envelope.TsRequest` and answers with its handler's
:class:`~servelab.protocol.torchserve_envelope.TsResponse`: the doors only move bytes. Versions are
TorchServe's strings (``"1.0"``), mapped to servelab's numbers by the model's parameters; the default is
the router's (``set-default`` pins it there, else the store's default version). Models of a Triton-layout
repository keep servelab's numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.backends.parameters import TorchServeHandlerParameters
from servelab.core.dataplane import DataPlane
from servelab.core.routing import HeaderLookup
from servelab.errors import NotFound
from servelab.protocol import model_config_pb2 as mc
from servelab.protocol.torchserve_envelope import (
    BODY,
    REQUEST,
    RESPONSE,
    RESPONSE_META,
    TsRequest,
    TsResponse,
)
from servelab.types import DataType, InferRequest, Tensor

__all__ = ["HANDLER_BACKEND", "ModelView", "model_view", "predict"]

HANDLER_BACKEND = "torchserve_handler"


@dataclass(frozen=True)
class ModelView:
    """A model as TorchServe's APIs name it: which servelab version a TorchServe version means."""

    name: str
    #: the servelab version to call ("" = the newest)
    version: str
    #: the TorchServe version string shown to clients
    torchserve_version: str
    handler: bool
    params: TorchServeHandlerParameters


def _params(config: mc.ModelConfig) -> TorchServeHandlerParameters:
    return TorchServeHandlerParameters.read(config) if config.backend == HANDLER_BACKEND else TorchServeHandlerParameters()


def model_view(dp: DataPlane, name: str, version: str) -> ModelView:
    """Resolve TorchServe's (model, version) to servelab's; NotFound in TorchServe's words. Without a
    version the router picks (:mod:`servelab.core.routing`: set-default's pin, a routing policy, the store's
    default version, else the newest), so rollouts and splits hold for TorchServe's doors too."""
    try:
        config = dp.model_config(name)
    except NotFound:
        raise NotFound(f"Model not found: {name}") from None
    params = _params(config)
    if version and params.version_numbers and version not in params.version_numbers and version not in dp.labels(name):
        raise NotFound(f"Model version: {version} does not exist for model: {name}")
    number = params.servelab_version(version) if (version and params.version_numbers) else version
    try:
        resolved = int(dp.resolve_version(name, number))
    except NotFound as exc:  # TorchServe's words, then the router's (labels); a rule-breaking version stays a 400
        raise NotFound(f"Model version: {version} does not exist for model: {name} ({exc.message})") from None
    shown = params.torchserve_version(resolved) if params.version_numbers else (version or str(resolved))
    return ModelView(name, number, shown, config.backend == HANDLER_BACKEND, params)


def _bytes_tensor(name: str, array: object) -> Tensor:
    return Tensor.from_numpy(name, array, DataType.BYTES)  # type: ignore[arg-type]


async def predict(
    dp: DataPlane, view: ModelView, request: TsRequest, headers: HeaderLookup | None = None
) -> TsResponse:
    """One TorchServe request through a handler model: the handler's answer, as TorchServe sends it.
    ``headers`` reach the router (a sticky split's key)."""
    body, meta = request.to_rows()
    infer = InferRequest(view.name, [_bytes_tensor(BODY, body), _bytes_tensor(REQUEST, meta)], view.version)
    response = await dp.infer_async(infer, headers)
    outputs = {t.name: t.data for t in response.outputs}
    return TsResponse.from_outputs(outputs[RESPONSE][0], outputs[RESPONSE_META][0])
