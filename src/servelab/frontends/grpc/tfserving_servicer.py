"""``tensorflow.serving.PredictionService`` and ``ModelService`` on the data plane.

Clients built on ``tensorflow-serving-api`` (``PredictionServiceStub``, ``ModelServiceStub``) talk to
these unchanged: the messages are TF Serving's (:mod:`servelab.protocol.tfserving`). Each method
only translates; names, labels and signatures resolve in :mod:`servelab.frontends.tfserving`, and
errors leave through the one gRPC error table (:func:`~servelab.frontends.grpc.errors.rpc`).
"""

from __future__ import annotations

import asyncio
from typing import TypeAlias

import grpc.aio

from servelab.core.dataplane import DataPlane
from servelab.errors import InvalidArgument
from servelab.frontends.grpc.errors import rpc
from servelab.frontends.grpc.metadata import Metadata
from servelab.frontends.grpc.tfserving_codec import from_numpy, to_numpy
from servelab.frontends.tfserving import Catalog, Target, classify, predict, regress
from servelab.frontends.tfserving.examples import serialized_examples
from servelab.frontends.tfserving.reload import reload_config
from servelab.protocol import tfserving as tfs
from servelab.repository.tfserving import TfServingRepository

__all__ = ["ModelServicer", "PredictionServicer"]

Context: TypeAlias = grpc.aio.ServicerContext
_SIGNATURE_DEF = "signature_def"
_STATE = tfs.get_model_status_pb2.ModelVersionStatus.State
_CODE = tfs.error_codes_pb2.Code


def _version_choice(spec: tfs.model_pb2.ModelSpec) -> tuple[str, str]:
    """(version, label) of a ModelSpec; both empty for the newest."""
    if not spec.name:
        raise InvalidArgument("model_spec.name is empty; name the model to use")
    version = str(spec.version.value) if spec.HasField("version") else ""
    label = spec.version_label if spec.WhichOneof("version_choice") == "version_label" else ""
    return version, label


def _target(catalog: Catalog, spec: tfs.model_pb2.ModelSpec) -> Target:
    return catalog.resolve(spec.name, *_version_choice(spec), spec.signature_name)


def _answered(spec: tfs.model_pb2.ModelSpec, target: Target, version: str) -> None:
    """The ModelSpec of a response: the model, the version that answered, the signature used."""
    spec.name = target.model.name
    spec.version.value = int(version)
    spec.signature_name = target.signature.key


class PredictionServicer(tfs.prediction_service_pb2_grpc.PredictionServiceServicer):
    """Predict, Classify, Regress, MultiInference and GetModelMetadata."""

    def __init__(self, dataplane: DataPlane, *, max_elements: int) -> None:
        self.catalog = Catalog(dataplane)
        self.max_elements = max_elements

    @rpc
    async def Predict(
        self, request: tfs.predict_pb2.PredictRequest, context: Context
    ) -> tfs.predict_pb2.PredictResponse:
        target = _target(self.catalog, request.model_spec)
        inputs = {key: to_numpy(proto, key, self.max_elements) for key, proto in request.inputs.items()}
        version, outputs = await predict(self.catalog, target, inputs, list(request.output_filter), Metadata(context))
        response = tfs.predict_pb2.PredictResponse()
        _answered(response.model_spec, target, version)
        for key, array in outputs.items():
            from_numpy(array, response.outputs[key])
        return response

    @rpc
    async def Classify(
        self, request: tfs.classification_pb2.ClassificationRequest, context: Context
    ) -> tfs.classification_pb2.ClassificationResponse:
        target = _target(self.catalog, request.model_spec)
        version, classes = await classify(self.catalog, target, serialized_examples(request.input), Metadata(context))
        response = tfs.classification_pb2.ClassificationResponse()
        _answered(response.model_spec, target, version)
        _classifications(response.result, classes)
        return response

    @rpc
    async def Regress(
        self, request: tfs.regression_pb2.RegressionRequest, context: Context
    ) -> tfs.regression_pb2.RegressionResponse:
        target = _target(self.catalog, request.model_spec)
        version, values = await regress(self.catalog, target, serialized_examples(request.input), Metadata(context))
        response = tfs.regression_pb2.RegressionResponse()
        _answered(response.model_spec, target, version)
        response.result.regressions.extend(tfs.regression_pb2.Regression(value=v) for v in values)
        return response

    @rpc
    async def MultiInference(
        self, request: tfs.inference_pb2.MultiInferenceRequest, context: Context
    ) -> tfs.inference_pb2.MultiInferenceResponse:
        examples = serialized_examples(request.input)
        response = tfs.inference_pb2.MultiInferenceResponse()
        for task in request.tasks:
            target = _target(self.catalog, task.model_spec)
            result = response.results.add()
            if task.method_name == tfs.CLASSIFY_METHOD:
                version, classes = await classify(self.catalog, target, examples)
                _classifications(result.classification_result, classes)
            elif task.method_name == tfs.REGRESS_METHOD:
                version, values = await regress(self.catalog, target, examples)
                result.regression_result.regressions.extend(tfs.regression_pb2.Regression(value=v) for v in values)
            else:
                raise InvalidArgument(f"task method_name {task.method_name!r}: MultiInference runs "
                                      f"{tfs.CLASSIFY_METHOD!r} or {tfs.REGRESS_METHOD!r} tasks")
            _answered(result.model_spec, target, version)
        return response

    @rpc
    async def GetModelMetadata(
        self, request: tfs.get_model_metadata_pb2.GetModelMetadataRequest, context: Context
    ) -> tfs.get_model_metadata_pb2.GetModelMetadataResponse:
        fields = list(request.metadata_field)
        if fields != [_SIGNATURE_DEF]:
            raise InvalidArgument(f"metadata_field must be [{_SIGNATURE_DEF!r}], the one field TF Serving answers; "
                                  f"got {fields}")
        spec = request.model_spec
        version = self.catalog.version(spec.name, *_version_choice(spec))
        response = tfs.get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.name = spec.name
        response.model_spec.version.value = int(version)
        response.metadata[_SIGNATURE_DEF].Pack(self.catalog.signature_def_map(spec.name, version))
        return response


def _classifications(result: tfs.classification_pb2.ClassificationResult, classes: list[list[tuple[str, float]]]) -> None:
    for row in classes:
        result.classifications.add().classes.extend(
            tfs.classification_pb2.Class(label=label, score=score) for label, score in row
        )


class ModelServicer(tfs.model_service_pb2_grpc.ModelServiceServicer):
    """GetModelStatus and HandleReloadConfigRequest."""

    def __init__(self, dataplane: DataPlane, repository: TfServingRepository | None) -> None:
        self.dataplane = dataplane
        self.catalog = Catalog(dataplane)
        self.repository = repository

    @rpc
    async def GetModelStatus(
        self, request: tfs.get_model_status_pb2.GetModelStatusRequest, context: Context
    ) -> tfs.get_model_status_pb2.GetModelStatusResponse:
        version, label = _version_choice(request.model_spec)
        response = tfs.get_model_status_pb2.GetModelStatusResponse()
        for row in self.catalog.status(request.model_spec.name, version, label):
            status = response.model_version_status.add(version=row.version, state=_STATE.Value(row.state))
            status.status.error_code = _CODE.Value(row.error_code)
            status.status.error_message = row.error_message
        return response

    @rpc
    async def HandleReloadConfigRequest(
        self, request: tfs.model_management_pb2.ReloadConfigRequest, context: Context
    ) -> tfs.model_management_pb2.ReloadConfigResponse:
        failures = await asyncio.to_thread(reload_config, self.dataplane, self.repository, request.config)
        if failures:
            raise InvalidArgument("the new config is served, but some models failed to load: " + "; ".join(failures))
        response = tfs.model_management_pb2.ReloadConfigResponse()
        response.status.error_code = _CODE.OK
        return response
