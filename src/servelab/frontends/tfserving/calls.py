"""Predict, Classify and Regress as calls on the data plane, with TF Serving's checks and results.

The front doors decode their wire format to numpy (TensorProto or JSON; tf.Example lists to
serialized strings) and call these; the one infer path is :meth:`DataPlane.infer_async`. Classify
and Regress follow TF Serving's rules: the signature's method must be ``tensorflow/serving/classify``
(``/regress``), its one input is ``inputs`` (serialized ``tf.Example`` strings), and its outputs are
``classes`` (DT_STRING) and/or ``scores`` (DT_FLOAT) of shape [examples, classes], or ``outputs``
(DT_FLOAT) of shape [examples] or [examples, 1].
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from servelab.core.routing import HeaderLookup
from servelab.errors import InvalidArgument
from servelab.frontends.tfserving.catalog import TF_DTYPES, Catalog, SignatureView, Target
from servelab.protocol import tfserving as tfs
from servelab.types import DataType, InferRequest, RequestedOutput, Tensor

__all__ = ["Classes", "classify", "predict", "regress"]

#: per example, (label, score) per class
Classes = list[list[tuple[str, float]]]
_INPUTS, _CLASSES, _SCORES, _OUTPUTS = "inputs", "classes", "scores", "outputs"
_METHODS = (tfs.PREDICT_METHOD, tfs.CLASSIFY_METHOD, tfs.REGRESS_METHOD)


def _dt(datatype: DataType) -> str:
    return tfs.types_pb2.DataType.Name(TF_DTYPES[datatype])


def _tensor(sig: SignatureView, key: str, array: np.ndarray) -> Tensor:
    spec = sig.inputs[key]
    try:
        datatype = DataType.from_numpy(array.dtype)
    except ValueError:
        raise InvalidArgument(f"input {key!r} has numpy dtype {array.dtype}, which TensorFlow does not take") from None
    if datatype is not spec.datatype:
        raise InvalidArgument(
            f"input {key!r} is {_dt(datatype)}; signature {sig.key!r} expects {_dt(spec.datatype)}"
        )
    if spec.expand and sig.batched and array.ndim == 1:
        array = array.reshape(array.shape[0], 1)  # Triton's [1] + empty reshape: [N] travels as [N, 1]
    return Tensor(key, datatype, tuple(array.shape), array)


def _check_inputs(sig: SignatureView, given: Sequence[str]) -> None:
    expected = set(sig.inputs)
    unknown = sorted(set(given) - expected)
    missing = sorted(expected - set(given))
    if unknown or missing:
        raise InvalidArgument(
            f"signature {sig.key!r} takes inputs {sorted(expected)}; the request has unknown {unknown} "
            f"and lacks {missing}"
        )


async def predict(
    catalog: Catalog, target: Target, inputs: Mapping[str, np.ndarray], output_filter: Sequence[str] = (),
    headers: HeaderLookup | None = None,
) -> tuple[str, dict[str, np.ndarray]]:
    """(version that answered, output key -> array) for a Predict on any signature; ``headers`` (HTTP
    headers or gRPC metadata) only serve a routing policy's sticky key."""
    sig = target.signature
    if sig.method not in _METHODS:
        raise InvalidArgument(f"signature {sig.key!r} has method {sig.method!r}; expected one of {list(_METHODS)}")
    _check_inputs(sig, list(inputs))
    outputs = sorted(sig.signature_def.outputs)
    unknown = [n for n in output_filter if n not in sig.signature_def.outputs]
    if unknown:
        raise InvalidArgument(f"output_filter names {unknown}, not outputs of signature {sig.key!r} ({outputs})")
    request = InferRequest(
        sig.servelab_name,
        [_tensor(sig, key, array) for key, array in inputs.items()],
        target.version,
        outputs=[RequestedOutput(n) for n in dict.fromkeys(output_filter)],
    )
    response = await catalog.dataplane.infer_async(request, headers)
    return response.model_version, {t.name: _as_signed(sig, t.name, t.data) for t in response.outputs}


def _as_signed(sig: SignatureView, key: str, array: np.ndarray) -> np.ndarray:
    """An output in its signature's rank: Triton's [1] + empty reshape answers [N, 1] for TF's [N]."""
    shape = sig.signature_def.outputs[key].tensor_shape
    if not shape.unknown_rank and len(shape.dim) == array.ndim - 1 and array.ndim == 2 and array.shape[-1] == 1:
        return array.reshape(array.shape[0])
    return array


def _examples_input(target: Target, method: str, verb: str, serialized: Sequence[bytes]) -> dict[str, np.ndarray]:
    """The ``inputs`` tensor of a classify or regress call, after TF Serving's checks of the signature."""
    sig = target.signature
    if sig.method != method:
        raise InvalidArgument(f"Expected {verb} signature method_name to be {method}. Was: {sig.method}"
                              f" (signature {sig.key!r})")
    if set(sig.signature_def.inputs) != {_INPUTS}:
        raise InvalidArgument(f"signature {sig.key!r}: a {verb} signature has one input, {_INPUTS!r} "
                              f"(serialized tf.Example); it has {sorted(sig.signature_def.inputs)}")
    if not serialized:
        raise InvalidArgument("Input is empty: send at least one example")
    array = np.empty(len(serialized), dtype=object)
    array[:] = list(serialized)
    return {_INPUTS: array}


async def classify(
    catalog: Catalog, target: Target, serialized: Sequence[bytes], headers: HeaderLookup | None = None
) -> tuple[str, Classes]:
    """(version, per example the (label, score) of each class) as TF Serving's Classify computes them."""
    inputs = _examples_input(target, tfs.CLASSIFY_METHOD, "classification", serialized)
    wanted = [n for n in (_CLASSES, _SCORES) if n in target.signature.signature_def.outputs]
    if not wanted:
        raise InvalidArgument(f"Expected classification signature outputs to contain at least one of "
                              f"{_CLASSES!r} or {_SCORES!r} (signature {target.signature.key!r})")
    version, outputs = await predict(catalog, target, inputs, wanted, headers)
    n = len(serialized)
    classes = _matrix(outputs.get(_CLASSES), _CLASSES, DataType.BYTES, n)
    scores = _matrix(outputs.get(_SCORES), _SCORES, DataType.FP32, n)
    if classes is not None and scores is not None and classes.shape[1] != scores.shape[1]:
        raise InvalidArgument(f"Tensors class and score should match in dim_size(1). Got {classes.shape[1]} "
                              f"vs. {scores.shape[1]}")
    count = (classes if classes is not None else scores).shape[1]  # type: ignore[union-attr]
    labels = [[_label(v) for v in row] for row in classes] if classes is not None else [[""] * count] * n
    values = scores.tolist() if scores is not None else [[0.0] * count] * n
    return version, [list(zip(labels[i], values[i], strict=True)) for i in range(n)]


async def regress(
    catalog: Catalog, target: Target, serialized: Sequence[bytes], headers: HeaderLookup | None = None
) -> tuple[str, list[float]]:
    """(version, one value per example) as TF Serving's Regress computes them."""
    inputs = _examples_input(target, tfs.REGRESS_METHOD, "regression", serialized)
    if _OUTPUTS not in target.signature.signature_def.outputs:
        raise InvalidArgument(f"signature {target.signature.key!r}: a regression signature has the output "
                              f"{_OUTPUTS!r}")
    version, outputs = await predict(catalog, target, inputs, [_OUTPUTS], headers)
    values = outputs[_OUTPUTS]
    if values.dtype != np.float32:
        raise InvalidArgument(f"Expected output Tensor of DT_FLOAT. Got: {values.dtype}")
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.ndim != 1 or values.shape[0] != len(serialized):
        raise InvalidArgument(f"Expected output Tensor shape to be either [batch_size] or [batch_size, 1] with "
                              f"batch_size {len(serialized)}; got {list(values.shape)}")
    return version, values.tolist()


def _matrix(value: np.ndarray | None, name: str, datatype: DataType, examples: int) -> np.ndarray | None:
    if value is None:
        return None
    if value.ndim != 2 or value.shape[0] != examples:
        raise InvalidArgument(f"Expected {name} Tensor shape: [batch_size num_classes] with batch_size "
                              f"{examples}; got {list(value.shape)}")
    if DataType.from_numpy(value.dtype) is not datatype:
        raise InvalidArgument(f"Expected {name} Tensor of {_dt(datatype)}. Got: {value.dtype}")
    return value


def _label(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
