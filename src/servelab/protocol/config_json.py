"""A ModelConfig in Triton's JSON form: what ``GET /v2/models/<name>/config`` returns and what a python
model reads from ``args["model_config"]``; one converter for the REST front door, the repository and the
python backend (which may not import the repository layer)."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from servelab.protocol import model_config_pb2 as mc

__all__ = ["config_to_dict"]


def config_to_dict(config: mc.ModelConfig) -> dict[str, Any]:
    """Triton's JSON form of a config, as ``GET /v2/models/<name>/config`` returns it.

    Like Triton: field names as in the .proto, every field without presence printed with its default
    (scalars, repeated fields, maps; message fields only when set), 64-bit integers as JSON numbers
    (protobuf's JSON mapping writes them as strings), fields in the .proto's order.
    """
    out = json_format.MessageToDict(
        config, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return _numbers(config.DESCRIPTOR, out)


_INT64 = frozenset(
    {
        FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64,
    }
)  # fmt: skip


def _numbers(descriptor: Descriptor, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` (one message as MessageToDict made it) with 64-bit integers as numbers, in field order."""
    out: dict[str, Any] = {}
    for field in descriptor.fields:
        if field.name not in obj:
            continue
        value = obj[field.name]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            value = {k: _value(value_field, v) for k, v in value.items()}
        elif field.is_repeated:
            value = [_value(field, v) for v in value]
        else:
            value = _value(field, value)
        out[field.name] = value
    return out


def _value(field: FieldDescriptor, value: Any) -> Any:
    if field.message_type is not None:
        return _numbers(field.message_type, value)
    if field.type in _INT64 and isinstance(value, str):
        return int(value)
    return value
