"""Model instances in worker processes, for runtimes that hold the GIL (the Python backend).

The backend is rebuilt in a spawned child from its BackendContext and answers execute calls over a pipe.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import pickle
import signal
import threading
from typing import Any

from servelab.backends.base import Backend, BackendContext, Inputs, Outputs
from servelab.errors import InternalError, ServelabError
from servelab.protocol import model_config_pb2 as mc

__all__ = ["ProcessInstance", "to_processes"]

log = logging.getLogger("servelab.instances")

_START_TIMEOUT_S = 120.0


def _payload(ctx: BackendContext) -> tuple[Any, ...]:
    """A BackendContext as picklable parts (the generated ModelConfig class pickles only as bytes)."""
    return (ctx.model_name, ctx.version, ctx.version_dir, ctx.config.SerializeToString(), ctx.threads, ctx.extra)


def _context(payload: tuple[Any, ...]) -> BackendContext:
    name, version, version_dir, config, threads, extra = payload
    return BackendContext(name, version, version_dir, mc.ModelConfig.FromString(config), threads, None, extra)


def _serve(cls: type[Backend], payload: tuple[Any, ...], conn: Any) -> None:
    """Child process: build the backend from its context, then answer execute calls until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when this worker stops
    ctx = _context(payload)
    try:
        backend = cls(ctx)
        backend.load()
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            break
        if message is None:
            break
        try:
            conn.send(backend.execute(message))
        except Exception as exc:
            conn.send([InternalError(f"model '{ctx.model_name}' failed in its worker process: {exc}")] * len(message))
    backend.unload()


class ProcessInstance(Backend):
    """Proxy for one instance living in a spawned worker process; tensors travel pickled over a pipe."""

    releases_gil = True  # the calling thread only waits on the pipe

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner.ctx)
        self.inner_class = type(inner)
        self.kind = inner.kind  # type: ignore[misc]
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(
            target=_serve, args=(self.inner_class, _payload(inner.ctx), child), daemon=True,
            name=f"instance-{inner.ctx.model_name}-{inner.ctx.version}",
        )
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def start(self) -> None:
        self._process.start()

    def load(self) -> None:
        """Wait until the child has loaded its copy of the model (start() first)."""
        if self._process.pid is None:
            self.start()
        if not self._conn.poll(_START_TIMEOUT_S):
            self.unload()
            raise InternalError(f"model '{self.ctx.model_name}': worker process did not start in {_START_TIMEOUT_S:g} s")
        status, detail = self._conn.recv()
        if status != "ready":
            self.unload()
            raise InternalError(f"model '{self.ctx.model_name}' failed to load in its worker process: {detail}")

    def infer(self, inputs: Inputs) -> Outputs:
        result = self.execute([inputs])[0]
        if isinstance(result, ServelabError):
            raise result
        return result

    def execute(self, requests: list[Inputs]) -> list[Outputs | ServelabError]:
        with self._lock:
            try:
                self._conn.send(requests)
                results: list[Outputs | ServelabError] = self._conn.recv()
            except (EOFError, OSError, BrokenPipeError) as exc:
                code = self._process.exitcode
                err = InternalError(f"model '{self.ctx.model_name}': worker process died (exit code {code}): {exc}")
                return [err] * len(requests)
        return results

    def unload(self) -> None:
        with self._lock:
            with contextlib.suppress(OSError):
                self._conn.send(None)
            self._process.join(timeout=10)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(timeout=5)
            self._conn.close()


def _picklable(backend: Backend) -> bool:
    if backend.kind == "ensemble":  # its steps call back into this process's data plane
        return False
    try:
        pickle.dumps((type(backend), _payload(backend.ctx)))
    except Exception:
        return False
    return True


def to_processes(instances: list[Backend]) -> None:
    """Replace each instance, in place, by a worker process running its own copy (started in parallel).

    The child gets the context without ``ctx.infer`` (calls back into the server cannot cross the
    process); ensembles, which need it, and unpicklable classes stay in threads. The in-process
    copies are unloaded once every worker has loaded, so the model is not held twice.
    """
    if not all(_picklable(b) for b in instances):
        log.warning("model %s: instances cannot move to worker processes (context not picklable); "
                    "they run in threads", instances[0].ctx.model_name)
        return
    proxies = [ProcessInstance(b) for b in instances]
    try:
        for proxy in proxies:
            proxy.start()
        for proxy in proxies:
            proxy.load()
    except BaseException:
        for proxy in proxies:
            if proxy.pid is not None and proxy._process.is_alive():
                proxy.unload()
        raise
    for backend in instances:
        try:
            backend.unload()
        except Exception:
            log.exception("unloading the in-process copy of %s failed", backend.ctx.model_name)
    instances[:] = proxies
