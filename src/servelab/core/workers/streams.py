"""Running a decoupled request on one of a model version's instances, wherever they run.

A worker-process instance streams the responses back over its channel (:meth:`WorkerInstance.open_stream`);
an instance in a thread of the server runs the backend's ``execute_stream`` on a thread of its own, one
execution at a time per instance (as a worker does), its responses going straight to the sink. The
instance is the least busy available one.
"""

from __future__ import annotations

import threading
import weakref

from servelab.backends.base import Backend, Executed, StreamItem, StreamRequest
from servelab.core.workers._sinks import AsyncSink, StreamSink, ThreadSink
from servelab.core.workers.instance import WorkerInstance
from servelab.errors import InternalError, Unavailable, Unsupported

__all__ = ["AsyncSink", "StreamSink", "ThreadSink", "start_stream"]

#: one execution at a time per thread instance
_LOCKS: weakref.WeakKeyDictionary[Backend, threading.Lock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def _load(backend: Backend) -> int:
    if isinstance(backend, WorkerInstance):
        return backend.busy
    return 0


def start_stream(instances: list[Backend], request: StreamRequest, sink: StreamSink) -> None:
    """Start ``request`` on the least busy available instance; its responses go to ``sink``."""
    ready = [b for b in instances if not isinstance(b, WorkerInstance) or b.available]
    if not ready:
        reasons = "; ".join(b.down_reason for b in instances if isinstance(b, WorkerInstance))
        sink.put(StreamItem(error=Unavailable(f"no instance can take the request: {reasons}"), final=True))
        return
    backend = min(ready, key=_load)
    if isinstance(backend, WorkerInstance):
        backend.open_stream(request, sink)
        return
    if not hasattr(backend, "execute_stream"):
        sink.put(StreamItem(error=Unsupported(f"backend {backend.kind!r} cannot answer decoupled requests"), final=True))
        return
    threading.Thread(target=_run_in_thread, args=(backend, request, sink), daemon=True,
                     name=f"decoupled-{backend.ctx.model_name}").start()  # fmt: skip


def _run_in_thread(backend: Backend, request: StreamRequest, sink: StreamSink) -> None:
    with _LOCKS_GUARD:
        lock = _LOCKS.setdefault(backend, threading.Lock())
    request.cancelled = lambda: sink.cancelled
    with lock:
        if sink.cancelled:
            return
        try:
            executed: Executed = backend.execute_stream([request], lambda _, item: sink.put(item))  # type: ignore[attr-defined]
        except Exception as exc:  # the backend guards its model; this is the last line of defence
            sink.put(StreamItem(error=InternalError(f"model '{backend.ctx.model_name}' failed: {exc}"), final=True))
            return
    sink.executed = executed
