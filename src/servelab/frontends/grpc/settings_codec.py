"""Trace and log settings messages <-> the plain dicts of :mod:`servelab.frontends.trace_logging`."""

from __future__ import annotations

from typing import Any

from servelab.errors import InvalidArgument
from servelab.protocol import grpc_service_pb2 as pb

__all__ = ["log_settings_message", "settings_from_log", "settings_from_trace", "trace_settings_message"]


def settings_from_trace(request: pb.TraceSettingRequest) -> dict[str, Any]:
    """Each setting's values as a list of strings (an empty list clears the setting, as in Triton)."""
    return {key: list(value.value) for key, value in request.settings.items()}


def trace_settings_message(settings: dict[str, Any]) -> pb.TraceSettingResponse:
    out = pb.TraceSettingResponse()
    for key, value in settings.items():
        out.settings[key].value.extend([str(v) for v in value] if isinstance(value, list) else [str(value)])
    return out


def settings_from_log(request: pb.LogSettingsRequest) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in request.settings.items():
        choice = value.WhichOneof("parameter_choice")
        if choice is None:
            raise InvalidArgument(f"log setting '{key}' has no value; set bool_param, uint32_param or string_param")
        out[key] = getattr(value, choice)
    return out


def log_settings_message(settings: dict[str, Any]) -> pb.LogSettingsResponse:
    out = pb.LogSettingsResponse()
    for key, value in settings.items():
        slot = out.settings[key]
        if isinstance(value, bool):
            slot.bool_param = value
        elif isinstance(value, int):
            slot.uint32_param = value
        else:
            slot.string_param = str(value)
    return out
