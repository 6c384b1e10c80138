"""A TorchServe model store as servelab's model repository (``servelab serve --torchserve-config``).

The store's archives and model folders (:mod:`.torchserve_archive`) are grouped by model name, one
servelab version per TorchServe version (:mod:`.torchserve_layout`), and served on the
``torchserve_handler`` backend. The registry sees the same interface as a Triton-layout
:class:`~servelab.repository.ModelRepository`: models are listed from what is in the store now (an
archive copied in later can be registered), archives are unpacked when a model loads (again when the
archive changed) into a private folder removed with this object. ``load_models`` entries of the form
``name=archive`` serve that archive under ``name``, as TorchServe does.

A load may carry a config override (the management API's scale: another instance count) for a model of
the store; file uploads are refused: models come from the store only.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import tempfile
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servelab.backends import backend_class
from servelab.config.settings import TorchServeSettings, default_threads
from servelab.errors import InvalidArgument, NotFound, ServelabError
from servelab.protocol import model_config_pb2 as mc
from servelab.repository.config import config_to_text
from servelab.repository.repository import ModelRepository, ModelSource, check_complete
from servelab.repository.torchserve_archive import (
    StoreEntry,
    read_entry,
    scan_store,
    store_entry_name,
    unpack,
)
from servelab.repository.torchserve_layout import BACKEND, ModelPlan, plan_model
from servelab.trust import check_model_name

__all__ = ["DEFAULT_MAX_UNPACKED_BYTES", "TorchServeRepository"]

log = logging.getLogger("servelab.torchserve")

DEFAULT_MAX_UNPACKED_BYTES = 16 * 1024**3


class TorchServeRepository(ModelRepository):
    """The models of one TorchServe model store."""

    def __init__(
        self,
        store: Path,
        *,
        properties_models: dict[str, dict[str, dict[str, Any]]] | None = None,
        renames: Mapping[str, str] | None = None,
        default_workers: int = 1,
        max_workers: int = 8,
        response_timeout_s: int = 120,
        max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES,
        envelope: str | None = None,
        request_timeout_s: float = 0.0,
    ) -> None:
        super().__init__([])
        self.store = Path(store).resolve()
        if not self.store.is_dir():
            raise NotFound(f"TorchServe model store {store} does not exist or is not a folder")
        self.properties_models = properties_models or {}
        #: store entry -> the model name it is served under (``load_models`` ``name=archive``)
        self.renames = dict(renames or {})
        self.default_workers = default_workers
        self.max_workers = max_workers
        self.response_timeout_s = response_timeout_s
        self.max_unpacked_bytes = max_unpacked_bytes
        #: config.properties service_envelope: every handler's request envelope, as in TorchServe
        self.envelope = envelope
        #: the server's request deadline (0 = unknown): a longer responseTimeout is named in the log
        self.request_timeout_s = request_timeout_s
        self._lock = threading.RLock()
        self._unpacked_root = Path(tempfile.mkdtemp(prefix="servelab-torchserve-"))
        weakref.finalize(self, shutil.rmtree, str(self._unpacked_root), True)
        self._unpacked: dict[tuple[str, int], tuple[str, Path]] = {}
        self._noted: set[str] = set()
        self._scanned: tuple[tuple[str, int, int], ...] | None = None
        self._plans: dict[str, ModelPlan | ServelabError] = {}

    @classmethod
    def from_settings(cls, settings: TorchServeSettings, max_workers: int, request_timeout_s: float = 0.0) -> TorchServeRepository:
        """The repository ``servelab serve --torchserve-config`` serves."""
        assert settings.model_store is not None, "TorchServeSettings is checked first"
        renames = {}
        for item in settings.load_models:
            name, equals, url = item.partition("=")
            if equals:
                renames[store_entry_name(url, "load_models entry")] = check_model_name(name, "load_models name")
        return cls(settings.model_store, properties_models=settings.models, renames=renames,
                   default_workers=settings.default_workers or default_threads(), max_workers=max_workers,
                   response_timeout_s=settings.default_response_timeout_s,
                   max_unpacked_bytes=settings.max_unpacked_bytes, envelope=settings.service_envelope,
                   request_timeout_s=request_timeout_s)  # fmt: skip

    def startup_models(self, load_models: list[str]) -> list[str]:
        """The models ``load_models`` names (``all`` = every model of the store), as registry names."""
        if any(item.strip().lower() == "all" for item in load_models):
            return ["*"]
        names = []
        for item in load_models:
            name, equals, url = item.partition("=")
            try:
                names.append(name if equals else self.model_for_url(url or name))
            except ServelabError as exc:
                log.error("load_models entry %r: %s", item, exc.message)
        return names

    # ----- what the store holds -----
    def plans(self) -> dict[str, ModelPlan | ServelabError]:
        """Every model of the store now: its plan, or why it cannot be served (re-read when the store's
        listing changes: a name, size or modification time)."""
        listing = self._listing()
        with self._lock:
            if listing != self._scanned:
                self._plans, self._scanned = self._scan(), listing
            return self._plans

    def _listing(self) -> tuple[tuple[str, int, int], ...]:
        rows = []
        for path in self.store.iterdir():
            try:
                st = path.stat()
            except OSError:
                continue
            rows.append((path.name, st.st_size, st.st_mtime_ns))
        return tuple(sorted(rows))

    def _scan(self) -> dict[str, ModelPlan | ServelabError]:
        entries, errors = scan_store(self.store)
        grouped: dict[str, list[StoreEntry]] = {}
        for entry in entries:
            entry.model_name = self.renames.get(entry.file, entry.model_name)
            grouped.setdefault(entry.model_name, []).append(entry)
        found: dict[str, ModelPlan | ServelabError] = {}
        for name, group in sorted(grouped.items()):
            try:
                found[name] = plan_model(
                    name, group, properties_models=self.properties_models.get(name), default_workers=self.default_workers,
                    max_workers=self.max_workers, response_timeout_s=self.response_timeout_s, envelope=self.envelope,
                )  # fmt: skip
            except ServelabError as exc:
                found[name] = exc
        for file, error in errors.items():
            self._note(file, f"{file} is not a servable TorchServe archive: {error.message}")
        return found

    def model_for_url(self, url: str) -> str:
        """The model a management ``register url=...`` names: an archive or folder of the store."""
        entry = read_entry(self.store, store_entry_name(url))
        return self.renames.get(entry.file, entry.model_name)

    # ----- the registry's view -----
    def model_names(self) -> list[str]:
        return sorted(self.plans())

    def model_dir(self, name: str) -> Path:
        self._plan(name)
        return self.store

    def fingerprint(self, name: str) -> str:
        found = self.plans().get(name)
        if isinstance(found, ServelabError) or found is None:
            return f"error:{found.message if found is not None else 'missing'}"
        digest = hashlib.sha1(config_to_text(found.config).encode())
        for version, entry in sorted(found.versions.items()):
            digest.update(f"{version}:{entry.file}:{entry.stamp};".encode())
        return digest.hexdigest()

    def read(
        self, name: str, override: mc.ModelConfig | None = None, files: Mapping[str, bytes] | None = None
    ) -> ModelSource:
        if files:
            raise InvalidArgument(f"model '{name}' comes from the TorchServe model store: put its archive there "
                                  "instead of sending files with the load request")
        plan = self._plan(name)
        notes = list(plan.notes)
        if 0 < self.request_timeout_s < plan.knobs.response_timeout_s:
            notes.append(f"responseTimeout {plan.knobs.response_timeout_s} s is longer than the server's request "
                         f"timeout ({self.request_timeout_s:g} s, --request-timeout-s), which applies to every model")
        for note in notes:
            self._note(f"{name}:{note}", f"model {name}: {note}")
        config = mc.ModelConfig()
        config.CopyFrom(plan.config)
        if override is not None:
            config = self._overridden(name, plan, override)
        check_complete(config)
        with self._lock:
            folders = {v: self._unpack(name, v, entry) for v, entry in plan.versions.items()}
        return ModelSource(name, self._unpacked_root / name, config, BACKEND, folders, self.fingerprint(name),
                           backend_class(BACKEND))  # fmt: skip

    def location(self, name: str) -> str:
        try:
            plan = self._plan(name)
        except ServelabError:
            return "not in the TorchServe model store"
        return ", ".join(str(self.store / e.file) for e in plan.versions.values())

    def _redactions(self, name: str) -> dict[str, str]:
        prefixes = super()._redactions(name)
        prefixes[str(self.store)] = ""
        prefixes[str(self._unpacked_root)] = ""
        return prefixes

    # ----- internals -----
    def _plan(self, name: str) -> ModelPlan:
        check_model_name(name)
        found = self.plans().get(name)
        if found is None:
            raise NotFound(f"model '{name}' is not in the TorchServe model store")
        if isinstance(found, ServelabError):
            raise found
        return found

    def _overridden(self, name: str, plan: ModelPlan, override: mc.ModelConfig) -> mc.ModelConfig:
        """A load's config for a store model: the store's, with the override's instances and batching."""
        if override.backend not in ("", BACKEND) or (override.name and override.name != name):
            raise InvalidArgument(f"model '{name}' comes from the TorchServe model store; a load may change its "
                                  "workers and batching only, not its backend or name")
        config = mc.ModelConfig()
        config.CopyFrom(plan.config)
        if override.instance_group:
            del config.instance_group[:]
            config.instance_group.extend(override.instance_group)
        if override.max_batch_size:
            config.max_batch_size = override.max_batch_size
        if override.HasField("dynamic_batching"):
            config.dynamic_batching.CopyFrom(override.dynamic_batching)
        return config

    def _unpack(self, name: str, version: int, entry: StoreEntry) -> Path:
        key = (name, version)
        known = self._unpacked.get(key)
        if known is not None and known[0] == entry.stamp and known[1].exists():
            return known[1]
        folder = unpack(entry, self._unpacked_root / name / str(version), self.max_unpacked_bytes)
        self._unpacked[key] = (entry.stamp, folder)
        return folder

    def _note(self, key: str, message: str) -> None:
        if key not in self._noted:
            self._noted.add(key)
            log.warning("TorchServe model store: %s", message)
