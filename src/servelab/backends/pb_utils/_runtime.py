"""What ``pb_utils`` reaches the server through: BLS calls, decoupled BLS streams and custom metrics.

The python backend installs the services of the instance it loads (:func:`install`): in a worker
process they cross the worker's channel to the server, in a server thread they call the server
directly. Imported by a plain ``python`` (a model's unit test), nothing is installed: metrics are kept
in this process and a BLS call says that it needs a server.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.backends.base import InferFn, StreamFn
from servelab.metrics.custom import CustomMetrics, MetricSink

__all__ = ["Services", "current", "install"]


@dataclass(frozen=True)
class Services:
    """The server's side of one model instance (any field None: not available there)."""

    #: (model, version or "", inputs) -> outputs: a BLS call (enters the server like a request)
    infer: InferFn | None = None
    #: (model, version or "", inputs, parameters) -> responses: a BLS call to a decoupled model
    stream: StreamFn | None = None
    #: where MetricFamily values go
    metrics: MetricSink | None = None
    #: the model these services belong to (log lines name it)
    model: str = ""


_LOCAL = Services(metrics=CustomMetrics().bind("this process"))
_current = _LOCAL


def install(services: Services) -> None:
    """Make ``services`` the ones pb_utils uses in this process (the python backend does, at load).

    A worker process holds one model instance; models in threads of the server all get the same server.
    """
    global _current
    _current = Services(services.infer, services.stream, services.metrics or _LOCAL.metrics, services.model)


def current() -> Services:
    return _current
