"""The schedulers that run requests on a model version's instances.

:class:`Scheduler` is what the registry attaches to each loaded model version. It owns the parts every
scheduler shares: the response cache (looked up before a request is scheduled, filled after), the
latency and batch-size histograms the metrics read, and the in-flight count unloading drains.
:class:`DirectScheduler` runs each request as it comes: in the caller's thread for the in-process API,
in a worker thread for servers. :class:`~servelab.core.batching.DynamicBatcher` queues and merges.

Instance groups: the registry loads ``sum(instance_group.count)`` instances (1 when the config has
no instance_group) with ``cores // count`` runtime threads each. One instance with every core stays
the default: on the 2-core host measured (benchmarks/batching.py, batch-1 gRPC at concurrency 64,
dynamic batching) 1 ORT session x 2 threads served 2,268 req/s and 2 sessions x 1 thread 2,170
(ratio 0.96), with half the model memory. Runtimes that hold the GIL (``Backend.releases_gil`` False,
e.g. the Python backend) get one worker *process* per instance (:mod:`servelab.core.workers`).

Every execution goes through ``Backend.execute_timed`` (the one batch rule, or a worker's own
timing). Time a request waits for its instance (a busy worker, a busy thread pool) is queue time.
"""

from servelab.core.scheduling.base import Scheduler, request_rows
from servelab.core.scheduling.direct import DirectScheduler

__all__ = ["DirectScheduler", "Scheduler", "request_rows"]
