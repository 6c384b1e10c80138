"""Every TF Serving RPC is in the auth table: one missing there would pass the door unchecked."""

from __future__ import annotations

import importlib

from servelab.config.settings import ApiGroup
from servelab.frontends.auth import GRPC_METHODS
from servelab.protocol import tfserving  # noqa: F401  (generates the modules imported below)

# Imported by name: the generated package exists only once servelab.protocol.tfserving has run, so a
# static import here would sort differently on a clean checkout than on a built one.
_APIS = "servelab.protocol._generated.tfserving.tensorflow_serving.apis"
model_service_pb2 = importlib.import_module(f"{_APIS}.model_service_pb2")
prediction_service_pb2 = importlib.import_module(f"{_APIS}.prediction_service_pb2")


def test_every_tfserving_rpc_is_classified() -> None:
    for module, service in ((prediction_service_pb2, "PredictionService"), (model_service_pb2, "ModelService")):
        descriptor = module.DESCRIPTOR.services_by_name[service]
        for method in descriptor.methods:
            assert f"/{descriptor.full_name}/{method.name}" in GRPC_METHODS, method.full_name
    assert GRPC_METHODS["/tensorflow.serving.PredictionService/Predict"] is ApiGroup.INFERENCE
    assert GRPC_METHODS["/tensorflow.serving.ModelService/GetModelStatus"] is ApiGroup.METADATA
    assert GRPC_METHODS["/tensorflow.serving.ModelService/HandleReloadConfigRequest"] is ApiGroup.MODEL_REPOSITORY
