"""Models on disk: Triton's layout, one folder per model, numbered version folders inside.

``<repo>/<model>/config.pbtxt`` and ``<repo>/<model>/<version>/model.{onnx,pt,pt2,xml,plan,py}`` or
``model.savedmodel/``. Reading a model parses its config, picks the backend, selects versions by policy
and auto-completes what the config leaves out from the model file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from servelab.backends import backend_class, backend_for_files, backend_for_platform
from servelab.errors import InvalidArgument, NotFound
from servelab.protocol import model_config_pb2 as mc
from servelab.repository.config import read_config
from servelab.repository.versions import available_versions, select_versions

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


class ModelRepository:
    def __init__(self, roots: Path | str | list[Path] | list[str]) -> None:
        items = roots if isinstance(roots, list) else [roots]
        self.roots = [Path(r).resolve() for r in items]
        for root in self.roots:
            if not root.is_dir():
                raise NotFound(f"model repository {root} does not exist or is not a folder")

    def model_names(self) -> list[str]:
        names: set[str] = set()
        for root in self.roots:
            names.update(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
        return sorted(names)

    def model_dir(self, name: str) -> Path:
        for root in self.roots:
            path = root / name
            if path.is_dir():
                return path
        raise NotFound(f"model '{name}' is not in the repository {[str(r) for r in self.roots]}")

    def fingerprint(self, name: str) -> str:
        """Changes whenever config.pbtxt or any file under a version folder changes."""
        directory = self.model_dir(name)
        digest = hashlib.sha1()
        for path in sorted(directory.rglob("*")):
            if "__pycache__" in path.parts:
                continue
            if path.is_file():
                st = path.stat()
                digest.update(f"{path.relative_to(directory)}:{st.st_size}:{st.st_mtime_ns};".encode())
        return digest.hexdigest()

    def read(self, name: str, override: mc.ModelConfig | None = None) -> ModelSource:
        """Parse, pick the backend, select versions and auto-complete; errors say what to fix."""
        directory = self.model_dir(name)
        fingerprint = self.fingerprint(name)
        if override is not None:
            config = mc.ModelConfig()
            config.CopyFrom(override)
        else:
            config, _ = read_config(directory)
        available = available_versions(directory)
        if not available:
            raise InvalidArgument(f"model '{name}': no version folder (expected {directory}/1/model.*)")
        versions = select_versions(config, list(available))
        newest = available[versions[-1]]
        backend = resolve_backend(config, newest)
        config.backend = backend
        if backend in _NEEDS_FILE:
            _set_filename(config, backend, newest)
        backend_class(backend).autocomplete(config, newest)
        check_complete(config)
        return ModelSource(name, directory, config, backend, {v: available[v] for v in versions}, fingerprint)


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
            f"model '{config.name}': cannot tell the backend: {version_dir} has no model.onnx, model.pt, "
            "model.pt2, model.xml, model.plan, model.savedmodel or model.py; set `backend:` in config.pbtxt"
        )
    return found[0]


def _set_filename(config: mc.ModelConfig, backend: str, version_dir: Path) -> None:
    if not config.default_model_filename:
        found = backend_for_files(version_dir)
        if found and found[0] == backend:
            config.default_model_filename = found[1]
        else:
            config.default_model_filename = backend_class(backend).default_filename
    path = version_dir / config.default_model_filename
    if not path.exists():
        raise InvalidArgument(f"model '{config.name}': {path} does not exist (backend {backend!r})")


def check_complete(config: mc.ModelConfig) -> None:
    """Every input and output must have a name, a datatype and dims after auto-complete."""
    where = f"model '{config.name}'"
    if not config.input:
        raise InvalidArgument(
            f"{where}: no inputs in config.pbtxt and none could be read from the model; add e.g. "
            '`input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [16] }]`'
        )
    if not config.output:
        raise InvalidArgument(
            f"{where}: no outputs in config.pbtxt and none could be read from the model; add e.g. "
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
