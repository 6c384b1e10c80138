"""A TF Serving model config (``--model_config_file``) as servelab's model repository.

Each entry's ``<base_path>/<version>/saved_model.pb`` folders are read the way TF Serving reads them
(version policy, version labels), and each signature becomes a servelab model with the tensorflow
backend (:mod:`servelab.repository.tfserving_layout`). The registry sees the same interface as a
Triton-layout :class:`~servelab.repository.ModelRepository` and polls it as usual; this class keeps
TF Serving's timing: the base paths are re-scanned every ``file_system_poll_s`` (TF Serving's
``--file_system_poll_wait_seconds``; 0 = once at start) and the config file is re-read every
``config_poll_s`` (``--model_config_file_poll_wait_seconds``; 0 = never), so the registry's poll
interval is only the tick at which the two are looked at. :meth:`replace_config` is
``ModelService.HandleReloadConfigRequest``. A broken entry (no base path yet, no version, a
signature servelab cannot serve) is an unavailable model with the reason, never a failed server.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from servelab.backends import backend_class
from servelab.config.settings import TfServingSettings
from servelab.errors import InvalidArgument, NotFound, ServelabError
from servelab.protocol import model_config_pb2 as mc
from servelab.protocol import tfserving as tfs
from servelab.repository.config import config_to_text
from servelab.repository.repository import ModelRepository, ModelSource, check_complete
from servelab.repository.savedmodel import read_signatures
from servelab.repository.tfserving_batching import TF_SERVING_DEFAULTS, BatchingPlan, read_batching_parameters
from servelab.repository.tfserving_config import (
    ServedModel,
    TfServingConfig,
    parse_model_server_config,
    read_model_server_config,
)
from servelab.repository.tfserving_layout import (
    primary_signature,
    same_interface,
    select_versions,
    set_primary,
    signature_config,
    signature_model_names,
    version_folders,
)
from servelab.trust import check_model_name

__all__ = ["TfServingRepository"]

log = logging.getLogger("servelab.tfserving")


@dataclass
class _Servable:
    """One servelab model of the config: a signature of an entry, or the entry's error."""

    name: str
    model: ServedModel
    versions: dict[int, Path] = field(default_factory=dict)
    config: mc.ModelConfig | None = None
    error: ServelabError | None = None
    fingerprint: str = ""


class TfServingRepository(ModelRepository):
    """The models of a TF Serving ModelServerConfig, one servelab model per signature."""

    def __init__(
        self,
        config_file: Path,
        *,
        batching: BatchingPlan | None = None,
        file_system_poll_s: float = 1.0,
        config_poll_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__([])
        self.config_file = Path(config_file).resolve()
        self.batching = batching
        self.file_system_poll_s = file_system_poll_s
        self.config_poll_s = config_poll_s
        self._clock = clock
        self._lock = threading.RLock()
        #: the operator's file: what a reload request may name is bounded by it
        self._operator = read_model_server_config(self.config_file)
        self._config: TfServingConfig = self._operator
        self._config_stamp = self._stamp()
        self._config_checked = clock()
        self._snapshot: dict[str, _Servable] | None = None
        self._scanned = 0.0
        for note in batching.notes if batching else ():
            log.warning("%s", note)

    @classmethod
    def from_settings(cls, settings: TfServingSettings) -> TfServingRepository:
        """The repository ``servelab serve --tfserving-config`` serves (raises InvalidArgument on bad files)."""
        assert settings.config_file is not None, "TfServingSettings checks it"
        batching: BatchingPlan | None = None
        if settings.batching_parameters_file is not None:
            batching = read_batching_parameters(settings.batching_parameters_file)
        elif settings.enable_batching:
            batching = TF_SERVING_DEFAULTS
        return cls(settings.config_file, batching=batching, file_system_poll_s=settings.file_system_poll_s,
                   config_poll_s=settings.config_poll_s)

    # ----- the registry's view -----
    def model_names(self) -> list[str]:
        return sorted(self._current())

    def model_dir(self, name: str) -> Path:
        return self._servable(name).model.base_path

    def fingerprint(self, name: str) -> str:
        return self._servable(name).fingerprint

    def read(
        self, name: str, override: mc.ModelConfig | None = None, files: Mapping[str, bytes] | None = None
    ) -> ModelSource:
        if override is not None or files:
            raise InvalidArgument(
                f"model '{name}' comes from the TF Serving model config: change that config (or send "
                "ModelService.HandleReloadConfigRequest) instead of a config or files in a load request"
            )
        servable = self._servable(name)
        if servable.error is not None:
            raise servable.error
        assert servable.config is not None
        config = mc.ModelConfig()
        config.CopyFrom(servable.config)
        check_complete(config)
        return ModelSource(name, servable.model.base_path, config, "tensorflow", dict(servable.versions),
                           servable.fingerprint, backend_class("tensorflow"))

    def location(self, name: str) -> str:
        try:
            return str(self._servable(name).model.base_path)
        except ServelabError:
            return "not in the TF Serving model config"

    def _redactions(self, name: str) -> dict[str, str]:
        prefixes = super()._redactions(name)
        prefixes.update({str(m.base_path): m.name for m in self._config.models})
        prefixes[str(self.config_file.parent)] = ""
        return prefixes

    # ----- TF Serving's ModelService.HandleReloadConfigRequest -----
    def replace_config(self, message: tfs.model_server_config_pb2.ModelServerConfig) -> tuple[list[str], list[str]]:
        """Serve ``message`` from now on; returns (servelab models new or changed, models gone)."""
        new = parse_model_server_config(message, self._operator.folder, "ReloadConfigRequest", trusted=self._operator)
        with self._lock:
            before = {n: s.fingerprint for n, s in self._current().items()}
            self._config = new
            self._snapshot = None
            after = self._current()
        changed = sorted(n for n, s in after.items() if before.get(n) != s.fingerprint)
        return changed, sorted(set(before) - set(after))

    def served_models(self) -> tuple[ServedModel, ...]:
        """The TF Serving entries now served (for status and the import report)."""
        with self._lock:
            return self._config.models

    # ----- internals -----
    def _servable(self, name: str) -> _Servable:
        check_model_name(name)
        found = self._current().get(name)
        if found is None:
            raise NotFound(f"model '{name}' is not in the TF Serving model config")
        return found

    def _current(self) -> dict[str, _Servable]:
        with self._lock:
            now = self._clock()
            self._maybe_reread_config(now)
            due = self.file_system_poll_s > 0 and now - self._scanned >= self.file_system_poll_s
            if self._snapshot is None or due:
                previous = self._snapshot or {}
                self._snapshot = scan(self._config, self.batching)
                self._scanned = now
                _log_new_errors(previous, self._snapshot)
            return self._snapshot

    def _stamp(self) -> tuple[int, int]:
        try:
            st = self.config_file.stat()
        except OSError:
            return (-1, -1)
        return (st.st_size, st.st_mtime_ns)

    def _maybe_reread_config(self, now: float) -> None:
        if self.config_poll_s <= 0 or now - self._config_checked < self.config_poll_s:
            return
        self._config_checked = now
        stamp = self._stamp()
        if stamp == self._config_stamp:
            return
        self._config_stamp = stamp
        try:
            config = read_model_server_config(self.config_file)
        except ServelabError as exc:
            log.error("TF Serving model config changed but cannot be used; serving the previous one: %s", exc.message)
            return
        log.info("TF Serving model config changed: now %d model(s)", len(config.models))
        self._operator = self._config = config
        self._snapshot = None


def _log_new_errors(previous: dict[str, _Servable], current: dict[str, _Servable]) -> None:
    """Log a model that is not servable once per reason, not at every scan."""
    for name, servable in current.items():
        old = previous.get(name)
        if servable.error is not None and (old is None or old.fingerprint != servable.fingerprint):
            log.warning("TF Serving model config: %s is not servable: %s", name, servable.error.message)


def scan(config: TfServingConfig, batching: BatchingPlan | None) -> dict[str, _Servable]:
    """Every servelab model of ``config``, from what is on disk now."""
    found: dict[str, _Servable] = {}
    for model in config.models:
        for servable in _servables(model, batching):
            if servable.name in found:
                clash = InvalidArgument(
                    f"servelab model name {servable.name!r} is used by two TF Serving models (a model named "
                    f"like another one's 'model:signature'); rename one of them"
                )
                servable = _Servable(servable.name, model, error=clash, fingerprint=clash.message)
            found[servable.name] = servable
    return found


def _servables(model: ServedModel, batching: BatchingPlan | None) -> list[_Servable]:
    try:
        available = version_folders(model.base_path, model.name)
        chosen = select_versions(model.policy, list(available), model.name)
        signatures = {v: read_signatures(available[v], f"model {model.name!r} version {v}") for v in chosen}
        _check_labels(model, chosen)
        keys = sorted({k for sigs in signatures.values() for k in sigs})
        names = signature_model_names(model.name, keys)
    except ServelabError as exc:
        return [_Servable(model.name, model, error=exc, fingerprint=f"error:{exc.message}")]
    primary = primary_signature(keys)
    return [_signature(model, key, names, key == primary, signatures, available, batching) for key in keys]


def _check_labels(model: ServedModel, chosen: list[int]) -> None:
    unserved = {label: v for label, v in model.labels.items() if v not in chosen}
    if unserved:
        raise InvalidArgument(
            f"model {model.name!r}: version labels {unserved} point at versions that are not served "
            f"(served: {chosen}); a label may only name a served version, as in TF Serving"
        )


def _signature(
    model: ServedModel,
    key: str,
    names: dict[str, str],
    primary: bool,
    signatures: dict[int, dict[str, tfs.meta_graph_pb2.SignatureDef]],
    available: dict[int, Path],
    batching: BatchingPlan | None,
) -> _Servable:
    name = names[key]
    versions = [v for v in sorted(signatures) if key in signatures[v]]
    newest = signatures[versions[-1]][key]
    try:
        differ = [v for v in versions if not same_interface(signatures[v][key], newest)]
        if differ:
            raise InvalidArgument(
                f"model {model.name!r} signature {key!r}: versions {differ} take or give other tensors than "
                f"version {versions[-1]}; servelab serves one interface per signature (serve them as two models)"
            )
        config = signature_config(name, model.name, key, newest, batching=batching, policy=model.policy)
    except ServelabError as exc:
        return _Servable(name, model, error=exc, fingerprint=f"error:{exc.message}")
    if primary:
        set_primary(config, names, model.labels)
    folders = {v: available[v] for v in versions}
    return _Servable(name, model, folders, config, fingerprint=_fingerprint(config, folders))


def _fingerprint(config: mc.ModelConfig, folders: dict[int, Path]) -> str:
    """Changes when the config (signature, labels, policy, batching) or any file of a served version does."""
    digest = hashlib.sha1(config_to_text(config).encode())
    for version, folder in sorted(folders.items()):
        for path in sorted(folder.rglob("*")):
            try:
                st = path.stat()
            except OSError:
                continue
            if path.is_file():
                digest.update(f"{version}/{path.relative_to(folder)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return digest.hexdigest()
