"""Where instances run (thread or worker process), decided before anything is built; and the pool
of a registry's worker processes: their settings, every live one (so that the server's exit deadline
can kill them all), and the threads that serve their calls into the server."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from servelab.backends.base import Backend, BackendContext
from servelab.backends.parameters import SchedulerParameters
from servelab.config.settings import WorkerSettings
from servelab.core.workers.instance import WorkerInstance
from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc

__all__ = ["WorkerPool", "runs_in_worker"]

log = logging.getLogger("servelab.workers")

_CALL_THREADS = 16  #: a call may wait on another model, a stream call for its whole stream


def runs_in_worker(backend: type[Backend], config: mc.ModelConfig) -> bool:
    """Whether ``config``'s instances run in worker processes.

    Parameter ``instance_mode``: ``process`` always, ``thread`` never, ``auto`` (default) for runtimes
    that hold the GIL (``Backend.releases_gil`` False: the python backend). A class defined in a
    script's ``__main__`` cannot be imported by a worker: ``auto`` keeps it in threads.
    """
    try:
        mode = SchedulerParameters.read(config).instance_mode
    except InvalidArgument as exc:
        raise InvalidArgument(f"model '{config.name}': {exc.message}") from None
    if mode == "thread":
        return False
    importable = backend.__module__ != "__main__"
    if mode == "process":
        if not importable:
            raise InvalidArgument(
                f"model '{config.name}': instance_mode 'process' needs a backend a worker can import; "
                f"{backend.__qualname__} is defined in __main__: move it into a module"
            )
        return True
    if backend.releases_gil:
        return False
    if not importable:
        log.warning("model %s: backend %s is defined in __main__, so its instances run in threads",
                    config.name, backend.__qualname__)
        return False
    return True


class WorkerPool:
    """A registry's worker processes. ``timeout_s`` is the request deadline the workers enforce."""

    def __init__(self, settings: WorkerSettings | None = None, timeout_s: float = 60.0) -> None:
        self.settings = settings or WorkerSettings()
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._live: set[WorkerInstance] = set()
        self._calls: ThreadPoolExecutor | None = None

    def instance(self, ctx: BackendContext, backend: type[Backend]) -> WorkerInstance:
        """A (not yet started) worker instance of ``backend`` for ``ctx``."""
        worker = WorkerInstance(ctx, backend, self)
        with self._lock:
            self._live.add(worker)
        return worker

    def check_count(self, config: mc.ModelConfig, count: int) -> None:
        cap = self.settings.max_workers_per_model
        if count > cap:
            raise InvalidArgument(
                f"model '{config.name}' asks for {count} worker processes (instance_group count); "
                f"at most {cap} are allowed (settings workers.max_workers_per_model)"
            )

    def calls(self) -> ThreadPoolExecutor:
        """Threads that run the workers' calls into the server (a call may wait on another model)."""
        with self._lock:
            if self._calls is None:
                self._calls = ThreadPoolExecutor(_CALL_THREADS, thread_name_prefix="worker-calls")
            return self._calls

    def forget(self, worker: WorkerInstance) -> None:
        with self._lock:
            self._live.discard(worker)

    def live(self) -> list[WorkerInstance]:
        with self._lock:
            return list(self._live)

    def kill_all(self) -> None:
        """Stop every worker now (the exit deadline): nothing waits on a stuck one any more."""
        for worker in self.live():
            worker.kill()
        with self._lock:
            calls, self._calls = self._calls, None
        if calls is not None:
            calls.shutdown(wait=False, cancel_futures=True)
