"""``pb_utils.Logger``: a model's log lines in the server's log (python logging ``servelab.model.<name>``).

Which lines appear follows the server's log level, as in Triton; VERBOSE is DEBUG.
"""

from __future__ import annotations

import logging
from typing import ClassVar

from servelab.backends.pb_utils import _runtime

__all__ = ["Logger"]


class Logger:
    """``pb_utils.Logger.log_info(message)``, ``log_warn``, ``log_error``, ``log_verbose``, ``log(message, level)``."""

    INFO: ClassVar[int] = logging.INFO
    WARNING: ClassVar[int] = logging.WARNING
    ERROR: ClassVar[int] = logging.ERROR
    VERBOSE: ClassVar[int] = logging.DEBUG

    @staticmethod
    def log(message: str, level: int = logging.INFO) -> None:
        name = _runtime.current().model
        logging.getLogger(f"servelab.model.{name}" if name else "servelab.model").log(level, "%s", message)

    @staticmethod
    def log_info(message: str) -> None:
        Logger.log(message, Logger.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        Logger.log(message, Logger.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        Logger.log(message, Logger.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        Logger.log(message, Logger.VERBOSE)
