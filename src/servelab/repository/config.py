"""config.pbtxt <-> ModelConfig (protobuf text format, Triton's schema) and its JSON form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc
from servelab.trust import resolve_inside

__all__ = ["config_from_json", "config_to_dict", "config_to_text", "parse_config_text", "read_config"]

CONFIG_FILE = "config.pbtxt"


def parse_config_text(text: str, where: str) -> mc.ModelConfig:
    config = mc.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise InvalidArgument(f"{where}: {exc} (expected Triton's ModelConfig text format)") from None
    return config


def read_config(model_dir: Path) -> tuple[mc.ModelConfig, bytes]:
    """The parsed config.pbtxt of a model folder (empty config when absent) and its raw bytes."""
    path = resolve_inside(model_dir, CONFIG_FILE, CONFIG_FILE)
    if not path.exists():
        return mc.ModelConfig(name=model_dir.name), b""
    raw = path.read_bytes()
    where = f"{model_dir.name}/{CONFIG_FILE}"  # what a client may read: no server path
    config = parse_config_text(raw.decode("utf-8", errors="replace"), where)
    if config.name and config.name != model_dir.name:
        raise InvalidArgument(
            f"{where}: name {config.name!r} differs from its folder {model_dir.name!r}; rename one of them"
        )
    config.name = model_dir.name
    return config, raw


def config_from_json(text: str, name: str) -> mc.ModelConfig:
    """A config given as JSON (repository load API ``parameters.config``)."""
    config = mc.ModelConfig()
    try:
        json_format.Parse(text, config, ignore_unknown_fields=False)
    except (json_format.ParseError, json.JSONDecodeError) as exc:
        raise InvalidArgument(f"model '{name}': config override is not a valid ModelConfig JSON: {exc}") from None
    if config.name and config.name != name:
        raise InvalidArgument(f"config override names model {config.name!r} but was sent for {name!r}")
    config.name = name
    return config


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


def config_to_text(config: mc.ModelConfig) -> str:
    return text_format.MessageToString(config)
