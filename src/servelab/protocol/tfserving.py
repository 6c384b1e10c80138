"""TensorFlow Serving's wire schemas, generated from ``specs/tfserving`` into servelab's own pool.

``from servelab.protocol import tfserving as tfs`` then ``tfs.predict_pb2.PredictRequest``. The
messages have TF Serving's names and field numbers, so ``tensorflow-serving-api`` clients talk to
them unchanged, and they live in :data:`servelab.protocol._tfs_pool.POOL`, so a process may import
TensorFlow too (see :mod:`servelab.protocol.codegen`). Importing this module imports no TensorFlow.
"""

from __future__ import annotations

from servelab.protocol.codegen import generate as _generate

_generate()

from servelab.protocol._generated.tfserving.tensorflow.core.example import example_pb2, feature_pb2  # noqa: E402
from servelab.protocol._generated.tfserving.tensorflow.core.framework import (  # noqa: E402
    tensor_pb2,
    tensor_shape_pb2,
    types_pb2,
)
from servelab.protocol._generated.tfserving.tensorflow.core.protobuf import (  # noqa: E402
    error_codes_pb2,
    meta_graph_pb2,
    saved_model_pb2,
)
from servelab.protocol._generated.tfserving.tensorflow_serving.apis import (  # noqa: E402
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    input_pb2,
    model_management_pb2,
    model_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)
from servelab.protocol._generated.tfserving.tensorflow_serving.config import (  # noqa: E402
    file_system_storage_path_source_pb2,
    model_server_config_pb2,
)
from servelab.protocol._generated.tfserving.tensorflow_serving.servables.tensorflow import (  # noqa: E402
    session_bundle_config_pb2,
)

#: SignatureDef.method_name of TF Serving's three kinds of signature
PREDICT_METHOD = "tensorflow/serving/predict"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
#: the signature used when a request names none
DEFAULT_SIGNATURE = "serving_default"

__all__ = [
    "CLASSIFY_METHOD",
    "DEFAULT_SIGNATURE",
    "PREDICT_METHOD",
    "REGRESS_METHOD",
    "classification_pb2",
    "error_codes_pb2",
    "example_pb2",
    "feature_pb2",
    "file_system_storage_path_source_pb2",
    "get_model_metadata_pb2",
    "get_model_status_pb2",
    "inference_pb2",
    "input_pb2",
    "meta_graph_pb2",
    "model_management_pb2",
    "model_pb2",
    "model_server_config_pb2",
    "model_service_pb2_grpc",
    "predict_pb2",
    "prediction_service_pb2_grpc",
    "regression_pb2",
    "saved_model_pb2",
    "session_bundle_config_pb2",
    "tensor_pb2",
    "tensor_shape_pb2",
    "types_pb2",
]
