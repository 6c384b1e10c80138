"""Model instances in worker processes: the python backend, and any model with ``instance_mode: process``.

A worker is a program of its own (``python -m servelab.core.workers``), never a re-run of the
server's ``__main__``; it loads its instance once. Headers cross a socket pair, tensors cross in
shared memory (:mod:`._channel`, :mod:`._arena`). The server's side (:class:`WorkerInstance`)
queues requests (queue time), enforces the request deadline, kills a worker stuck past the kill
deadline and restarts a dead one with backoff; :class:`WorkerPool` holds a registry's workers and
:func:`runs_in_worker` decides thread or process before anything is built. :func:`start_stream` runs a
decoupled request (many responses, into a sink) on a worker or a thread instance. A front door sets
:data:`LINGER_ALLOWED` False in a request's context when its worker should not poll for the next request.
"""

from servelab.core.workers._loop_reading import LINGER_ALLOWED
from servelab.core.workers.instance import WorkerHost, WorkerInstance
from servelab.core.workers.pool import WorkerPool, runs_in_worker
from servelab.core.workers.streams import AsyncSink, StreamSink, ThreadSink, start_stream

__all__ = [
    "LINGER_ALLOWED", "AsyncSink", "StreamSink", "ThreadSink", "WorkerHost", "WorkerInstance", "WorkerPool", "runs_in_worker",
    "start_stream",
]
