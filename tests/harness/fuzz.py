"""What the decoder fuzz tests share: fixed seeds (``derandomize``: a failure reproduces), tensor limits small
enough that generated shapes reach them, and the property itself: a decoder decodes or refuses with a
ServelabError (which every front door maps to a clear status), never another exception (a 500 /
INTERNAL) and never slowly (a small body decodes in microseconds; a second means a pathological path).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings

from servelab.config.settings import LimitSettings
from servelab.errors import ServelabError

__all__ = ["FUZZ", "FUZZ_LIMITS", "SLOW_S", "decodes_or_refuses", "fuzz_settings"]

FUZZ_LIMITS = LimitSettings(max_tensor_elements=4096, max_tensor_rank=6)
SLOW_S = 1.0


def fuzz_settings(max_examples: int = 400) -> settings:
    """hypothesis settings of every fuzz test: ``max_examples``, fixed seeds, no deadline or health checks."""
    return settings(max_examples=max_examples, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


FUZZ = fuzz_settings()


def decodes_or_refuses(fn: Callable[..., Any], *args: Any) -> None:
    """``fn(*args)`` returns or raises a ServelabError, within :data:`SLOW_S`."""
    started = time.perf_counter()
    with contextlib.suppress(ServelabError):
        fn(*args)
    assert time.perf_counter() - started < SLOW_S
