"""Small helpers shared by the REST route modules: state lookup, JSON responses, threads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from servelab.config.settings import ServerSettings
from servelab.core.dataplane import DataPlane
from servelab.frontends.shared_memory import SharedMemory

__all__ = ["dataplane", "in_thread", "json_response", "model_and_version", "settings", "shared_memory"]

T = TypeVar("T")
_JSON = "application/json"


def dataplane(request: Request) -> DataPlane:
    return request.app.state.dataplane  # type: ignore[no-any-return]


def settings(request: Request) -> ServerSettings:
    return request.app.state.settings  # type: ignore[no-any-return]


def shared_memory(request: Request) -> SharedMemory:
    """The regions clients registered with this server (``create_app``'s ``shared_memory``)."""
    return request.app.state.shared_memory  # type: ignore[no-any-return]


def model_and_version(request: Request) -> tuple[str, str]:
    params = request.path_params
    return params["model"], params.get("version", "")


def _fallback(value: Any) -> Any:
    """What orjson cannot write natively: non-contiguous or unusual numpy arrays and scalars."""
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    raise TypeError(f"cannot serialise {type(value).__name__} as JSON")


def json_response(content: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = orjson.dumps(content, default=_fallback, option=orjson.OPT_SERIALIZE_NUMPY)
    return Response(body, status, headers, _JSON)


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking data-plane call (model load, unload with drain) off the event loop."""
    return await run_in_threadpool(fn, *args)
