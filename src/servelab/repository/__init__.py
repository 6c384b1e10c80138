"""Models on disk: Triton's repository layout, config.pbtxt, version policies and auto-complete."""

from servelab.repository.config import config_from_json, config_to_dict, config_to_text, parse_config_text
from servelab.repository.repository import ModelRepository, ModelSource
from servelab.repository.uploads import FILE_PREFIX

__all__ = [
    "FILE_PREFIX",
    "ModelRepository",
    "ModelSource",
    "config_from_json",
    "config_to_dict",
    "config_to_text",
    "parse_config_text",
]
