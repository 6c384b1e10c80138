"""Models on disk: Triton's repository layout, config.pbtxt, version policies and auto-complete."""

from servelab.repository.config import config_from_json, config_to_dict, config_to_text, parse_config_text
from servelab.repository.repository import ModelRepository, ModelSource

__all__ = [
    "ModelRepository",
    "ModelSource",
    "config_from_json",
    "config_to_dict",
    "config_to_text",
    "parse_config_text",
]
