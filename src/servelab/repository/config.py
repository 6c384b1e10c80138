"""config.pbtxt <-> ModelConfig (protobuf text format, Triton's schema) and its JSON form."""

from __future__ import annotations

import json
from pathlib import Path

from google.protobuf import json_format, text_format

from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc
from servelab.protocol.config_json import config_to_dict
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


def config_to_text(config: mc.ModelConfig) -> str:
    return text_format.MessageToString(config)
