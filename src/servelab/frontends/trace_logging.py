"""Triton's logging and trace extensions, protocol-neutral: the REST and gRPC routes translate only.

**Logging** is real: the settings read and change the level of the process's root logger (what
``--log-level`` sets at start). ``log_info``, ``log_warning``, ``log_error`` and ``log_verbose_level``
map onto one Python level (verbose > 0 is DEBUG; with every kind off, nothing is logged). ``log_file``
and ``log_format`` can be read; changing them is UNSUPPORTED (the log goes to standard error, in one
format: redirect it at start).

**Trace** is not implemented: the settings answer Triton's defaults with ``trace_level: ["OFF"]``, and an
update that would turn tracing on is UNSUPPORTED, saying what to use instead. The server metadata lists
``logging`` and not ``trace``.
"""

from __future__ import annotations

import logging
from typing import Any

from servelab.errors import InvalidArgument, Unsupported

__all__ = ["LOGGING_EXTENSION", "LoggingSettings", "trace_settings", "update_trace_settings"]

LOGGING_EXTENSION = "logging"
_BOOL_KEYS = ("log_info", "log_warning", "log_error")
_OFF_LEVEL = logging.CRITICAL + 10
_TRACE_DEFAULTS: dict[str, Any] = {
    "trace_level": ["OFF"],
    "trace_rate": "1000",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_file": "",
    "trace_mode": "triton",
}
TRACE_UNSUPPORTED = (
    "tracing is not supported by this server: trace_level can only be OFF; per-stage timings are in the "
    "statistics extension (/v2/models/<model>/stats) and the Prometheus metrics"
)


class LoggingSettings:
    """The logging extension over one logger (the root logger unless given)."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger if logger is not None else logging.getLogger()

    def get(self) -> dict[str, Any]:
        level = self.logger.getEffectiveLevel()
        return {
            "log_file": "",
            "log_info": level <= logging.INFO,
            "log_warning": level <= logging.WARNING,
            "log_error": level <= logging.ERROR,
            "log_verbose_level": 1 if level <= logging.DEBUG else 0,
            "log_format": "default",
        }

    def update(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Apply ``changes`` (any of Triton's keys) and return the settings now in force."""
        settings = self.get()
        for key, value in changes.items():
            settings[key] = _checked(key, value)
        self.logger.setLevel(_level(settings))
        return self.get()


def _checked(key: str, value: Any) -> Any:
    if key in _BOOL_KEYS:
        if not isinstance(value, bool):
            raise InvalidArgument(f"log setting '{key}' must be true or false; got {value!r}")
        return value
    if key == "log_verbose_level":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgument(f"log setting 'log_verbose_level' must be an integer >= 0; got {value!r}")
        return value
    if key == "log_file":
        if value != "":
            raise Unsupported("log_file cannot be changed: the server logs to standard error; redirect it at start")
        return value
    if key == "log_format":
        if value != "default":
            raise Unsupported(f"log_format {value!r} is not supported; this server writes one format, 'default'")
        return value
    raise InvalidArgument(
        f"unknown log setting '{key}'; expected log_file, log_info, log_warning, log_error, log_verbose_level "
        "or log_format"
    )


def _level(settings: dict[str, Any]) -> int:
    if settings["log_verbose_level"] > 0:
        return logging.DEBUG
    for key, level in zip(_BOOL_KEYS, (logging.INFO, logging.WARNING, logging.ERROR), strict=True):
        if settings[key]:
            return level
    return _OFF_LEVEL


def trace_settings() -> dict[str, Any]:
    """Triton's trace settings with tracing off (the only state this server has)."""
    return {k: list(v) if isinstance(v, list) else v for k, v in _TRACE_DEFAULTS.items()}


def update_trace_settings(changes: dict[str, Any]) -> dict[str, Any]:
    """Accept an update that leaves tracing off (or clears a setting); refuse one that turns it on."""
    for key, value in changes.items():
        if key not in _TRACE_DEFAULTS:
            raise InvalidArgument(f"unknown trace setting '{key}'; expected one of {sorted(_TRACE_DEFAULTS)}")
        if value is None or value == []:
            continue  # Triton: null clears a setting back to its default
        values = [str(v) for v in value] if isinstance(value, list) else [str(value)]
        keeps_off = all(v == "OFF" for v in values) if key == "trace_level" else values == [_TRACE_DEFAULTS[key]]
        if not keeps_off:
            raise Unsupported(TRACE_UNSUPPORTED)
    return trace_settings()
