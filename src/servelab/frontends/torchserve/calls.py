"""TorchServe's predictions over the data plane, shared by its REST door and its gRPC service.

A model on the ``torchserve_handler`` backend (a TorchServe archive) is called with one
:class:`~servelab.protocol.torchserve_envelope.TsRequest` and answers with its handler's
:class:`~servelab.protocol.torchserve_envelope.TsResponse`: the doors only move bytes. Versions are
TorchServe's strings (``"1.0"``), mapped to servelab's numbers by the model's parameters; the default is
the one set through ``set-default``, else the store's default version. Models of a Triton-layout
repository keep servelab's numbers and the newest as default.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.backends.parameters import TorchServeHandlerParameters
from servelab.core.dataplane import DataPlane
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


def model_view(dp: DataPlane, name: str, version: str, defaults: dict[str, str]) -> ModelView:
    """Resolve TorchServe's (model, version) to servelab's; NotFound in TorchServe's words."""
    try:
        config = dp.model_config(name)
    except NotFound:
        raise NotFound(f"Model not found: {name}") from None
    params = _params(config)
    wanted = version or defaults.get(name, "") or params.default_version or ""
    number = params.servelab_version(wanted) if params.versions else wanted
    if wanted and params.versions and wanted not in params.versions:
        raise NotFound(f"Model version: {wanted} does not exist for model: {name}")
    if number:
        try:
            dp.model_config(name, number)
        except NotFound:  # a version that breaks the rule stays a 400 (servelab.trust)
            raise NotFound(f"Model version: {wanted} does not exist for model: {name}") from None
    shown = wanted or (params.torchserve_version(int(number)) if number else "")
    return ModelView(name, number, shown, config.backend == HANDLER_BACKEND, params)


def _bytes_tensor(name: str, array: object) -> Tensor:
    return Tensor.from_numpy(name, array, DataType.BYTES)  # type: ignore[arg-type]


async def predict(dp: DataPlane, view: ModelView, request: TsRequest) -> TsResponse:
    """One TorchServe request through a handler model: the handler's answer, as TorchServe sends it."""
    body, meta = request.to_rows()
    infer = InferRequest(view.name, [_bytes_tensor(BODY, body), _bytes_tensor(REQUEST, meta)], view.version)
    response = await dp.infer_async(infer)
    outputs = {t.name: t.data for t in response.outputs}
    return TsResponse.from_outputs(outputs[RESPONSE][0], outputs[RESPONSE_META][0])
