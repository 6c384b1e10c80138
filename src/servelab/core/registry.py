"""Models in memory: load, unload and reload versions; states; model control modes.

A model that fails to load is UNAVAILABLE with the reason and leaves every other model serving. A
reload builds the new versions beside the old ones and swaps them in only when all loaded; a failed
reload keeps the old versions serving. Unload drains in-flight requests first.

Whether a version's instances run in threads or in worker processes is decided from the backend
class and the config before any instance is built, and each instance is loaded once (in its worker,
for worker processes; :mod:`servelab.core.loading` builds them). A version whose every worker is
restarting is not ready. The records it keeps (:mod:`servelab.core.records`) are what routing reads.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping

from servelab.backends.base import Backend, BackendContext, InferFn, StreamFn
from servelab.config.settings import ControlMode, default_threads
from servelab.core.batching import make_scheduler
from servelab.core.loading import SchedulerFactory, load_threads, ready_version, start_workers
from servelab.core.records import LoadedVersion, ModelRecord, ModelState
from servelab.core.workers import WorkerPool, runs_in_worker
from servelab.errors import InvalidArgument, NotFound, ServelabError, Unavailable, Unsupported
from servelab.metrics.custom import MetricStore
from servelab.protocol import model_config_pb2 as mc
from servelab.repository import ModelRepository, ModelSource
from servelab.repository.config import read_config
from servelab.trust import check_model_name

__all__ = ["LoadedVersion", "ModelRecord", "ModelRegistry", "ModelState", "SchedulerFactory"]

log = logging.getLogger("servelab.registry")


class ModelRegistry:
    def __init__(
        self,
        repository: ModelRepository,
        mode: ControlMode = ControlMode.NONE,
        *,
        max_tensor_elements: int = 64 * 1024 * 1024,
        drain_timeout_s: float = 30.0,
        scheduler_factory: SchedulerFactory = make_scheduler,
        cores: int | None = None,
        poll_secs: float = 15.0,
        workers: WorkerPool | None = None,
    ) -> None:
        self.repository = repository
        self.mode = mode
        self.max_tensor_elements = max_tensor_elements
        self.drain_timeout_s = drain_timeout_s
        self.scheduler_factory = scheduler_factory
        self.cores = cores or default_threads()
        self.poll_secs = poll_secs
        #: the worker processes of every version whose instances run isolated
        self.workers = workers if workers is not None else WorkerPool()
        #: set by the data plane so that ensembles can call other models (through the router)
        self.infer_fn: InferFn | None = None
        #: set by the data plane: how python models call (decoupled) models and read every response
        self.infer_stream_fn: StreamFn | None = None
        #: set by the server: where python models' custom metrics go (its /metrics)
        self.custom_metrics: MetricStore | None = None
        #: set by the router: whether a call to (model, version) never blocks (for ensembles' never_blocks)
        self.never_blocks_fn: Callable[[str, str], bool] | None = None
        #: set by the router: checks a model's routing before its new versions serve (raising fails the load)
        #: and returns what to run once they do
        self.on_load: Callable[[str, ModelSource], Callable[[], None]] | None = None
        self._records: dict[str, ModelRecord] = {}
        self._lock = threading.RLock()
        self._poller: threading.Thread | None = None
        self._stop = threading.Event()

    # ----- lookup (hot path: no lock, dict reads only) -----
    def serving(self, name: str) -> dict[int, LoadedVersion]:
        """The loaded versions of ``name`` (NotFound if unknown, Unavailable if none is loaded).

        Which of them serves a request is decided above, in :mod:`servelab.core.routing` alone.
        """
        record = self._records.get(name)
        if record is None:
            check_model_name(name)  # only on a miss: a loaded name passed it already
            raise NotFound(_unknown(name))
        versions = record.versions
        if not versions:
            reason = f": {record.reason}" if record.reason else ""
            raise Unavailable(
                f"Request for unknown model: '{name}' has no available versions; the model is not ready "
                f"({record.state.value}{reason})"
            )
        return versions

    def loaded(self, name: str, version: int) -> LoadedVersion | None:
        """The loaded version, or None (no exception: for bookkeeping after a request was answered)."""
        record = self._records.get(name)
        return record.versions.get(version) if record is not None else None

    def is_ready(self, name: str) -> bool:
        """Whether some version of ``name`` is loaded and can take requests."""
        record = self._records.get(name)
        return record is not None and any(lv.scheduler.available for lv in record.versions.values())

    def record(self, name: str) -> ModelRecord:
        record = self._records.get(name)
        if record is None:
            check_model_name(name)
            raise NotFound(_unknown(name))
        return record

    def records(self) -> list[ModelRecord]:
        return [self._records[n] for n in sorted(self._records)]

    def index(self) -> list[dict[str, str]]:
        """Repository index: every model on disk or in memory, with version, state and reason."""
        rows: list[dict[str, str]] = []
        names = set(self._records)
        with contextlib.suppress(OSError):
            names.update(self.repository.model_names())
        for name in sorted(names):
            record = self._records.get(name)
            if record is None:
                rows.append({"name": name, "version": "", "state": "", "reason": ""})
            elif record.versions:
                for v, lv in sorted(record.versions.items()):
                    state, reason = record.state.value, record.reason
                    if not lv.scheduler.available:
                        state, reason = ModelState.UNAVAILABLE.value, lv.scheduler.unavailable_reason()
                    rows.append({"name": name, "version": str(v), "state": state, "reason": reason})
            else:
                rows.append({"name": name, "version": "", "state": record.state.value, "reason": record.reason})
        return rows

    # ----- life cycle -----
    def startup(self, names: list[str] | None = None) -> None:
        """Load start-up models: all of them (none/poll modes) or the named ones ('*' = all)."""
        if self.mode is ControlMode.EXPLICIT:
            wanted = names or []
            if "*" in wanted:
                wanted = self.repository.model_names()
        else:
            wanted = self.repository.model_names()
        for name in self._ordered(wanted):
            try:
                self.load(name, _internal=True)
            except ServelabError as exc:
                log.error("model %s failed to load: %s", name, exc.message)
        if self.mode is ControlMode.POLL:
            self.start_polling()

    def load(
        self,
        name: str,
        override: mc.ModelConfig | None = None,
        *,
        files: Mapping[str, bytes] | None = None,
        _internal: bool = False,
    ) -> None:
        """Load or reload ``name``. On failure the model is UNAVAILABLE (or keeps its old versions).

        ``files`` (a load request's ``file:`` contents) are the model's folder for this load. Errors
        name no server path (the log line keeps it).
        """
        if self.mode is ControlMode.NONE and not _internal:
            raise Unsupported("model control mode is 'none': start the server with --model-control-mode explicit")
        try:
            self.repository.model_dir(name)  # bad names and unknown models fail before any record exists
        except NotFound as exc:
            raise NotFound(f"failed to load '{name}', {exc.message}") from None
        with self._lock:
            record = self._records.setdefault(name, ModelRecord(name))
            if not record.versions:
                record.state, record.reason = ModelState.LOADING, ""
            try:
                source = self.repository.read(name, override, files)
                loaded = self._load_versions(source)
            except Exception as exc:
                error = self._load_error(name, exc)
                self.repository.settle(name, None)
                self._failed(record, error.message)
                raise error from exc
            try:
                committed = self.on_load(name, source) if self.on_load is not None else None
            except ServelabError as exc:
                for lv in loaded.values():
                    lv.close(0)
                self.repository.settle(name, None)
                self._failed(record, exc.message)
                raise
            for lv in loaded.values():
                lv.labels = source.labels
            old = record.versions
            record.versions = loaded
            record.state, record.reason = ModelState.READY, ""
            record.fingerprint, record.backend, record.config = source.fingerprint, source.backend, source.config
            self.repository.settle(name, source)  # an upload it served from before may go: files stay open
            if committed is not None:
                committed()
        for lv in old.values():
            lv.close(self.drain_timeout_s)
        log.info("model %s ready (versions %s, backend %s)", name, sorted(loaded), source.backend)

    def _load_error(self, name: str, exc: Exception) -> ServelabError:
        """What a client reads about a failed load: the server's folders replaced by model-relative names."""
        if isinstance(exc, ServelabError):
            # Triton's wording, which clients match on: "failed to load '<name>', <why>"
            full = exc if exc.message.startswith("failed to load") else type(exc)(f"failed to load '{name}', {exc.message}")
        else:
            full = InvalidArgument(f"failed to load '{name}', {type(exc).__name__}: {exc}")
        log.warning("model %s (%s) failed to load: %s", name, self.repository.location(name), full.message)
        return self.repository.client_error(name, full)

    def unload(self, name: str, *, _internal: bool = False, deadline: float | None = None) -> None:
        """Drain and unload every version of ``name`` (by ``deadline``, a time.monotonic(), if given)."""
        if self.mode is ControlMode.NONE and not _internal:
            raise Unsupported("model control mode is 'none': start the server with --model-control-mode explicit")
        check_model_name(name)
        with self._lock:
            record = self._records.get(name)
            if record is None:
                if name in self.repository.model_names():
                    return
                raise NotFound(_unknown(name))
            old = record.versions
            record.state, record.reason = ModelState.UNLOADING, ""
            record.versions = {}
            self.repository.release(name)  # uploaded files go; open ones stay readable until closed
        for lv in old.values():
            if deadline is None:
                lv.close(self.drain_timeout_s)
            else:
                left = max(0.0, deadline - time.monotonic())
                lv.close(min(self.drain_timeout_s, left), stop_grace_s=min(5.0, left))
        record.state, record.reason = ModelState.UNAVAILABLE, "unloaded"

    def close(self, timeout_s: float | None = None) -> None:
        """Unload every model; with ``timeout_s`` all of it within that time (workers left are killed)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=5)
        for name in list(self._records):
            self.unload(name, _internal=True, deadline=deadline)
        self.workers.kill_all()

    # ----- poll mode -----
    def start_polling(self, interval_s: float | None = None) -> None:
        if self._poller is not None:
            return
        interval = interval_s or self.poll_secs
        self._poller = threading.Thread(target=self._poll_loop, args=(interval,), daemon=True, name="repo-poll")
        self._poller.start()

    def _poll_loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.poll()
            except Exception:
                log.exception("repository poll failed")

    def poll(self) -> list[str]:
        """Load new models, reload changed ones, unload removed ones. Returns the names acted on."""
        on_disk = set(self.repository.model_names())
        changed: list[str] = []
        for name in self._ordered(sorted(on_disk)):
            record = self._records.get(name)
            try:
                fingerprint = self.repository.fingerprint(name)
            except ServelabError:
                continue
            if record is not None and record.fingerprint == fingerprint:
                continue
            changed.append(name)
            try:
                self.load(name, _internal=True)
            except ServelabError as exc:
                log.error("reload of %s failed, %s: %s", name,
                          "old versions keep serving" if record and record.versions else "unavailable", exc.message)
                if record is not None:
                    record.fingerprint = fingerprint  # do not retry the same broken files every poll
        for name in set(self._records) - on_disk:
            if self._records[name].versions:
                changed.append(name)
                self.unload(name, _internal=True)
        return changed

    # ----- internals -----
    def _failed(self, record: ModelRecord, reason: str) -> None:
        record.reason = reason
        if record.versions:
            log.error("reload of %s failed (%s); previous versions keep serving", record.name, reason)
            record.state = ModelState.READY
        else:
            record.state = ModelState.UNAVAILABLE

    def _never_blocks(self, name: str, version: str) -> bool:
        """Whether running (name, version) synchronously waits only on the CPU (for ensembles)."""
        return self.never_blocks_fn is not None and self.never_blocks_fn(name, version)

    def _ordered(self, names: list[str]) -> list[str]:
        """Ensembles last, so the models they call are loaded first."""
        def is_ensemble(name: str) -> bool:
            try:
                config, _ = read_config(self.repository.model_dir(name))
            except (OSError, ServelabError):
                return False
            return config.platform == "ensemble" or config.HasField("ensemble_scheduling")
        return sorted(names, key=is_ensemble)

    def _load_versions(self, source: ModelSource) -> dict[int, LoadedVersion]:
        cls = source.backend_class
        assert cls is not None, "ModelRepository.read resolves the backend class"
        loaded: dict[int, LoadedVersion] = {}
        try:
            for version, version_dir in source.versions.items():
                loaded[version] = self._load_version(cls, source, version, version_dir)
        except BaseException:
            for lv in loaded.values():
                lv.close(0)
            raise
        return loaded

    def _load_version(self, cls: type[Backend], source: ModelSource, version: int, version_dir: object) -> LoadedVersion:
        config = source.config
        count = sum(g.count or 1 for g in config.instance_group) or 1
        threads = max(1, self.cores // count)
        isolated = runs_in_worker(cls, config)  # decided before anything is built
        if isolated:
            self.workers.check_count(config, count)
        contexts = [
            BackendContext(
                source.name, version, version_dir, config, threads, self.infer_fn,  # type: ignore[arg-type]
                calls_never_block=self._never_blocks, infer_stream=self.infer_stream_fn,
                custom_metrics=self.custom_metrics,
            )
            for _ in range(count)
        ]
        instances = start_workers(self.workers, cls, contexts) if isolated else load_threads(cls, contexts)
        return ready_version(source, version, instances, self.max_tensor_elements, self.scheduler_factory)


def _unknown(name: str) -> str:
    """Triton's text for a model the server does not know (tritonclient's examples match on it)."""
    return f"Request for unknown model: '{name}' is not found"
