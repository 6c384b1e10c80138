"""What a user's ``model.py`` may import: request and response objects for the python backend.

A model class (``TritonPythonModel`` or ``Model``) gets ``initialize(args)``, then
``execute(requests)`` with a list of :class:`InferenceRequest`, and returns one item per request: a
dict of output name -> numpy array, an :class:`InferenceResponse`, or an exception instance that
fails that request alone (``InvalidArgument`` for bad input, anything else is an internal error).
Triton's ``pb_utils`` spellings (``get_input_tensor_by_name``, ``Tensor.as_numpy``,
``InferenceResponse(output_tensors=...)``, ``TritonError``) work too, so
``import servelab.backends.python_api as pb_utils`` runs many Triton python models unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from servelab.errors import InternalError, InvalidArgument, ServelabError

__all__ = [
    "InferenceRequest",
    "InferenceResponse",
    "InvalidArgument",
    "ServelabError",
    "Tensor",
    "TritonError",
    "get_input_tensor_by_name",
    "get_output_tensor_by_name",
]


class TritonError(InternalError):
    """An error a model returns for one request (Triton's ``pb_utils.TritonError``)."""


@dataclass(slots=True)
class Tensor:
    """A named numpy array (Triton's ``pb_utils.Tensor``)."""

    tensor_name: str
    array: np.ndarray

    def name(self) -> str:
        return self.tensor_name

    def as_numpy(self) -> np.ndarray:
        return self.array


@dataclass(slots=True)
class InferenceRequest:
    """One request: its inputs by name, its parameters and the outputs it wants."""

    inputs: dict[str, np.ndarray]
    parameters: dict[str, Any] = field(default_factory=dict)
    requested_output_names: list[str] = field(default_factory=list)
    model_name: str = ""

    def get(self, name: str) -> np.ndarray:
        """The input called ``name``; KeyError names the inputs there are."""
        try:
            return self.inputs[name]
        except KeyError:
            raise KeyError(f"no input {name!r}; the request has {sorted(self.inputs)}") from None


@dataclass(slots=True)
class InferenceResponse:
    """Outputs for one request, or the error that failed it (Triton's ``pb_utils.InferenceResponse``)."""

    output_tensors: list[Tensor] = field(default_factory=list)
    error: Exception | str | None = None

    def as_dict(self) -> dict[str, np.ndarray]:
        return {t.tensor_name: t.array for t in self.output_tensors}

    def has_error(self) -> bool:
        return self.error is not None


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    """The input ``name`` as a Tensor, or None (Triton's helper of the same name)."""
    array = request.inputs.get(name)
    return None if array is None else Tensor(name, array)


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in response.output_tensors if t.tensor_name == name), None)
