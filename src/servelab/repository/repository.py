"""Models on disk: Triton's layout, one folder per model, numbered version folders inside.

``<repo>/<model>/config.pbtxt`` and ``<repo>/<model>/<version>/model.{onnx,pt,pt2,xml,plan,py}`` or
``model.savedmodel/``. Reading a model parses its config, picks the backend, selects versions by policy
and auto-completes what the config leaves out from the model file. Every name a request or a config
gives (the model, its files, its labels, uploaded files) goes through :mod:`servelab.trust` first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from servelab.backends import Backend, backend_class, backend_for_files, backend_for_platform
from servelab.errors import InvalidArgument, NotFound, ServelabError
from servelab.protocol import model_config_pb2 as mc
from servelab.repository.config import read_config
from servelab.repository.defaults import fill_defaults
from servelab.repository.fields import check_fields
from servelab.repository.uploads import UploadedFolders
from servelab.repository.versions import available_versions, select_versions
from servelab.repository.warmup import WarmupSample, read_warmup
from servelab.trust import check_model_name, check_uploadable, redact, resolve_inside, version_file

__all__ = ["ModelRepository", "ModelSource"]

_NEEDS_FILE = {"onnxruntime", "pytorch", "openvino", "tensorrt", "tensorflow", "python"}


@dataclass
class ModelSource:
    """Everything needed to load one model: its completed config and the version folders to serve."""

    name: str
    directory: Path
    config: mc.ModelConfig
    backend: str
    versions: dict[int, Path]
    fingerprint: str
    #: the backend class, resolved once here (custom ``module:Class`` backends only when allowed)
    backend_class: type[Backend] | None = None
    #: output name -> its labels (``label_filename``), read at load so that a reload reads them again
    labels: dict[str, list[str]] = field(default_factory=dict)
    #: ``model_warmup`` samples, built (and their files read) at load; run on every instance
    warmup: list[WarmupSample] = field(default_factory=list)


class ModelRepository:
    def __init__(
        self,
        roots: Path | str | list[Path] | list[str],
        *,
        allow_custom_backends: bool = False,
        auto_complete: bool = True,
    ) -> None:
        items = roots if isinstance(roots, list) else [roots]
        self._given = [str(r) for r in items]
        self.roots = [Path(r).resolve() for r in items]
        #: ``backend: "module:Class"`` imports that module: only when the operator allows it
        self.allow_custom_backends = allow_custom_backends
        #: False: Triton's --disable-auto-complete-config (--strict-model-config): nothing is read from the
        #: model file; config.pbtxt must state inputs, outputs and max_batch_size (defaults are still filled)
        self.auto_complete = auto_complete
        self.uploads = UploadedFolders()
        for root in self.roots:
            if not root.is_dir():
                raise NotFound(f"model repository {root} does not exist or is not a folder")

    def model_names(self) -> list[str]:
        names: set[str] = set()
        for root in self.roots:
            names.update(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
        return sorted(names)

    def model_dir(self, name: str) -> Path:
        """The folder of model ``name`` (a valid model name, see :mod:`servelab.trust`)."""
        check_model_name(name)
        if name.startswith((".", "_")):
            raise NotFound(
                f"model '{name}' is not in the repository: folders whose names start with '.' or '_' hold data"
            )
        for root in self.roots:
            path = root / name
            if path.is_dir():
                return path
        raise NotFound(f"model '{name}' is not in the model repository")

    def fingerprint(self, name: str) -> str:
        """Changes whenever config.pbtxt or any file under a version folder changes."""
        return _fingerprint(self.model_dir(name))

    def read(
        self, name: str, override: mc.ModelConfig | None = None, files: Mapping[str, bytes] | None = None
    ) -> ModelSource:
        """Parse, pick the backend, select versions and auto-complete; errors say what to fix.

        ``files`` (a load request's ``file:`` parameters) become the model's folder instead of its
        folder in the repository, as in Triton; they need ``override`` as their config. End every
        read of files with :meth:`settle`.
        """
        directory = self.model_dir(name)
        if files:
            if override is None:
                raise InvalidArgument(
                    f"model '{name}': a load with 'file:' parameters needs parameters.config as well "
                    "(the uploaded folder's ModelConfig, as in Triton)"
                )
            directory = self.uploads.write(name, files)
        return self._read(name, directory, override, uploaded=bool(files))

    def settle(self, name: str, source: ModelSource | None) -> None:
        """A load of ``name`` ended: it serves from ``source`` now, or (None) failed and keeps what it had."""
        self.uploads.settle(name, source.directory if source else None, loaded=source is not None)

    def release(self, name: str) -> None:
        """``name`` was unloaded: what it was served from may go."""
        self.uploads.release(name)

    def client_error(self, name: str, exc: ServelabError) -> ServelabError:
        """``exc`` with the server's folders in its message replaced by repository-relative names."""
        message = redact(exc.message, self._redactions(name))
        return exc if message == exc.message else type(exc)(message)

    def location(self, name: str) -> str:
        """Where ``name`` is read from, for the server's log (never for clients)."""
        folders = self.uploads.folders(name)
        if folders:
            return str(folders[-1])
        try:
            return str(self.model_dir(name).resolve())
        except ServelabError:
            return "not in the repository"

    def _redactions(self, name: str) -> dict[str, str]:
        prefixes = {given: "" for given in self._given}
        prefixes.update({str(root): "" for root in self.roots})
        for folder in self.uploads.folders(name):
            prefixes[str(folder.parent)] = ""
            prefixes[str(folder.resolve().parent)] = ""
        try:
            folder = self.model_dir(name)
        except ServelabError:
            return prefixes
        prefixes[str(folder.resolve())] = name
        return prefixes

    def _read(self, name: str, directory: Path, override: mc.ModelConfig | None, uploaded: bool) -> ModelSource:
        fingerprint = _fingerprint(directory)
        if override is not None:
            config = mc.ModelConfig()
            config.CopyFrom(override)
        else:
            config, _ = read_config(directory)
        available = available_versions(directory)
        if not available:
            raise InvalidArgument(f"model '{name}': no version folder (expected {name}/1/model.*)")
        versions = select_versions(config, list(available))
        newest = available[versions[-1]]
        backend = resolve_backend(config, newest)
        config.backend = backend
        if uploaded:  # before anything imports the backend or opens the files
            check_uploadable(backend)
        cls = backend_class(backend, allow_custom=self.allow_custom_backends)
        if backend in _NEEDS_FILE:
            _set_filename(config, backend, newest, cls)
        for v in versions:
            _check_model_filename(config, available[v])
        labels = read_labels(config, directory)
        if self.auto_complete:
            cls.autocomplete(config, newest)
        check_complete(config, strict=not self.auto_complete)
        check_fields(config, backend)
        fill_defaults(config)
        warmup = read_warmup(config, directory)
        chosen = {v: available[v] for v in versions}
        return ModelSource(name, directory, config, backend, chosen, fingerprint, cls, labels, warmup)


def _fingerprint(directory: Path) -> str:
    digest = hashlib.sha1()
    for path in sorted(directory.rglob("*")):
        if "__pycache__" in path.parts:
            continue
        if path.is_file():
            st = path.stat()
            digest.update(f"{path.relative_to(directory)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return digest.hexdigest()


def read_labels(config: mc.ModelConfig, directory: Path) -> dict[str, list[str]]:
    """Each output's ``label_filename`` (a file of the model's folder, one label per line)."""
    labels: dict[str, list[str]] = {}
    for output in config.output:
        if output.label_filename:
            field = f"output '{output.name}' label_filename"
            path = resolve_inside(directory, output.label_filename, field)
            labels[output.name] = path.read_text(errors="replace").splitlines() if path.is_file() else []
    return labels


def resolve_backend(config: mc.ModelConfig, version_dir: Path) -> str:
    if config.backend:
        return config.backend
    if config.platform:
        return backend_for_platform(config.platform)
    if config.HasField("ensemble_scheduling"):
        return "ensemble"
    if config.default_model_filename:
        found = backend_for_files(version_dir)
        if found:
            return found[0]
    found = backend_for_files(version_dir)
    if found is None:
        raise InvalidArgument(
            f"model '{config.name}': cannot tell the backend: version folder {version_dir.name} has no model.onnx, "
            "model.pt, model.pt2, model.xml, model.plan, model.savedmodel or model.py; set `backend:` in config.pbtxt"
        )
    return found[0]


def _set_filename(config: mc.ModelConfig, backend: str, version_dir: Path, cls: type[Backend]) -> None:
    if not config.default_model_filename:
        found = backend_for_files(version_dir)
        if found and found[0] == backend:
            config.default_model_filename = found[1]
        else:
            config.default_model_filename = cls.default_filename
    if not _check_model_filename(config, version_dir).exists():
        raise InvalidArgument(
            f"model '{config.name}': {version_dir.name}/{config.default_model_filename} does not exist "
            f"(backend {backend!r})"
        )


def _check_model_filename(config: mc.ModelConfig, version_dir: Path) -> Path:
    """The model file a config names, checked to stay inside the model's folder."""
    return version_file(version_dir, config.default_model_filename or ".", "default_model_filename")


def check_complete(config: mc.ModelConfig, *, strict: bool = False) -> None:
    """Every input and output must have a name, a datatype and dims after auto-complete.

    ``strict``: auto-complete is off, so the message says that nothing was read from the model file.
    """
    where = f"model '{config.name}'"
    source = (
        "auto-complete is off (--disable-auto-complete-config / --strict-model-config), so config.pbtxt "
        "must state it" if strict else "none could be read from the model"
    )
    if not config.input:
        raise InvalidArgument(
            f"{where}: no inputs in config.pbtxt and {source}; add e.g. "
            '`input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [16] }]`'
        )
    if not config.output:
        raise InvalidArgument(
            f"{where}: no outputs in config.pbtxt and {source}; add e.g. "
            '`output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [16] }]`'
        )
    seen: set[tuple[str, str]] = set()
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for t in tensors:
            if not t.name:
                raise InvalidArgument(f"{where}: an {kind} has no name")
            if (kind, t.name) in seen:
                raise InvalidArgument(f"{where}: {kind} '{t.name}' is declared twice")
            seen.add((kind, t.name))
            if t.data_type == mc.TYPE_INVALID:
                raise InvalidArgument(f"{where}: {kind} '{t.name}' has no data_type; add e.g. data_type: TYPE_FP32")
            if not t.dims and not t.HasField("reshape") and config.max_batch_size == 0:
                raise InvalidArgument(f"{where}: {kind} '{t.name}' has no dims; add e.g. dims: [-1]")
            if any(d < -1 or d == 0 for d in t.dims):
                raise InvalidArgument(f"{where}: {kind} '{t.name}' dims {list(t.dims)} must be positive or -1")
    if config.max_batch_size < 0:
        raise InvalidArgument(f"{where}: max_batch_size must be >= 0 (0 means the model does not batch)")
