"""Triton's ``triton_python_backend_utils`` API for python models served by servelab (``import
triton_python_backend_utils as pb_utils`` finds this package through the top-level module of that name).

A ``model.py`` written for Triton's python backend runs unchanged: ``Tensor`` (with DLPack),
``InferenceRequest`` (inputs, parameters, requested outputs, the response sender for decoupled models,
BLS ``exec`` / ``async_exec``), ``InferenceResponse``, ``TritonError`` with its codes,
``TritonModelException``, ``Logger``, ``MetricFamily`` custom metrics, the config helpers, and
``ModelConfig`` for ``auto_complete_config``. Imported outside a server (a model's unit test), everything
but BLS works in-process. Written for servelab from Triton's documented API; no Triton code is used.
"""

from servelab.backends.pb_utils._config import (
    ModelConfig,
    get_input_config_by_name,
    get_output_config_by_name,
    using_decoupled_model_transaction_policy,
)
from servelab.backends.pb_utils._errors import TritonError, TritonModelException
from servelab.backends.pb_utils._logger import Logger
from servelab.backends.pb_utils._metrics import Metric, MetricFamily
from servelab.backends.pb_utils._request import (
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceRequest,
    InferenceResponse,
    InferenceResponseSender,
    ResponseIterator,
)
from servelab.backends.pb_utils._tensor import (
    TRITON_STRING_TO_NUMPY,
    Tensor,
    deserialize_bytes_tensor,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
)

__all__ = [
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "Logger",
    "Metric",
    "MetricFamily",
    "ModelConfig",
    "ResponseIterator",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "load_model",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The input ``name`` of a request as a Tensor, or None."""
    array = inference_request.inputs.get(name)
    return None if array is None else Tensor(name, array)


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    """The output ``name`` of a response, or None."""
    return next((t for t in inference_response.output_tensors() if t.name() == name), None)


def _no_model_control(call: str) -> TritonModelException:
    return TritonModelException(
        f"pb_utils.{call}: Triton's model loading API is not offered to python models by servelab; load and "
        "unload models with the repository API (POST /v2/repository/models/<name>/load | unload)"
    )


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Not offered on servelab (raises, saying what to use instead)."""
    raise _no_model_control("load_model")


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Not offered on servelab (raises, saying what to use instead)."""
    raise _no_model_control("unload_model")


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Not offered on servelab (raises, saying what to use instead)."""
    raise _no_model_control("is_model_ready")
