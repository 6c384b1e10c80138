"""``tf.Example`` inputs of Classify and Regress: the gRPC ``Input`` message and REST's JSON examples.

Both become one serialized ``tf.Example`` per example, the string tensor a classify or regress
signature parses. With a context (``ExampleListWithContext``, REST ``"context"``) each example is
the context merged with the example, written as the two serializations one after the other: the
protobuf merge rule, so a feature given in both takes the example's value.

JSON values map as in TF Serving: a whole number (or true/false) is an int64 feature, a decimal a
float feature, a string or ``{"b64": ...}`` a bytes feature; a list holds values of one kind.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np

from servelab.errors import InvalidArgument
from servelab.protocol import tfserving as tfs

__all__ = ["examples_from_json", "serialized_examples"]

_INT64 = (-(2**63), 2**63 - 1)
_FLOAT_MAX = float(np.finfo(np.float32).max)


def serialized_examples(message: tfs.input_pb2.Input) -> list[bytes]:
    """The examples of an ``Input`` message, serialized (each merged with the context, if any)."""
    kind = message.WhichOneof("kind")
    if kind == "example_list":
        return [e.SerializeToString() for e in message.example_list.examples]
    if kind == "example_list_with_context":
        listed = message.example_list_with_context
        context = listed.context.SerializeToString()
        return [context + e.SerializeToString() for e in listed.examples]
    raise InvalidArgument("Input is empty: set input.example_list or input.example_list_with_context")


def examples_from_json(body: dict[str, Any]) -> list[bytes]:
    """REST ``{"examples": [...], "context": {...}}`` -> serialized examples."""
    examples = body.get("examples")
    if not isinstance(examples, list):
        raise InvalidArgument("the request needs 'examples': a list of objects, one per example "
                              '(e.g. {"examples": [{"x": 1.0}]})')
    if not examples:
        raise InvalidArgument("'examples' value is an empty array")
    context = b""
    if "context" in body:
        context = _example(body["context"], "context").SerializeToString()
    return [context + _example(e, f"examples[{i}]").SerializeToString() for i, e in enumerate(examples)]


def _example(value: Any, where: str) -> tfs.example_pb2.Example:
    if not isinstance(value, dict):
        raise InvalidArgument(f"{where}: an example must be a JSON object of features; got {type(value).__name__}")
    example = tfs.example_pb2.Example()
    for name, content in value.items():
        _fill(example.features.feature[name], content if isinstance(content, list) else [content],
              f"{where} feature {name!r}")
    return example


def _kind(value: Any, where: str) -> tuple[str, Any]:
    """(feature list kind, value to append) of one JSON value."""
    if isinstance(value, bool):
        return "int64_list", int(value)
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise InvalidArgument(f"{where}: {value} does not fit int64")
        return "int64_list", value
    if isinstance(value, float):
        if abs(value) > _FLOAT_MAX and value not in (float("inf"), float("-inf")):
            raise InvalidArgument(f"{where}: {value} does not fit a float feature")
        return "float_list", value
    if isinstance(value, str):
        return "bytes_list", value.encode()
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        try:
            return "bytes_list", base64.b64decode(value["b64"], validate=True)
        except binascii.Error as exc:
            raise InvalidArgument(f"{where}: invalid base64 in {{\"b64\": ...}}: {exc}") from None
    raise InvalidArgument(f"{where}: unexpected JSON value {value!r:.60}; expected a number, a string or "
                          '{"b64": "..."} (or a list of one kind of them)')


def _fill(feature: tfs.feature_pb2.Feature, values: list[Any], where: str) -> None:
    kind = ""
    items: list[Any] = []
    for value in values:
        this, item = _kind(value, where)
        if kind and this != kind:
            raise InvalidArgument(f"{where}: Unexpected element type: the list mixes {kind.split('_')[0]} and "
                                  f"{this.split('_')[0]} values")
        kind = this
        items.append(item)
    if kind:
        getattr(feature, kind).value.extend(items)
