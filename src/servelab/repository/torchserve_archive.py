"""A TorchServe model store on disk: ``.mar`` archives, ``.tar.gz`` archives and unarchived model folders.

Each entry is read the way TorchServe reads it: ``MAR-INF/MANIFEST.json`` (``model.modelName``,
``modelVersion``, ``handler``, ``serializedFile``, ``modelFile``, ``configFile``) and, when the manifest
names one, the ``model-config.yaml`` beside it. The model name is the manifest's (else the file name
without ``.mar`` / ``.tar.gz``), the version the manifest's (else ``1.0``).

Archives are unpacked into a folder servelab owns, never next to the store, and every member goes through
:mod:`servelab.trust` first: absolute names, ``..``, links and special files are refused, and the
members together may not exceed ``max_unpacked_bytes`` (a zip bomb is refused before anything is
written). Entry names a request gives (``register url=x.mar``) are file names of the store only.
"""

from __future__ import annotations

import io
import json
import shutil
import stat
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from servelab.errors import InvalidArgument, NotFound
from servelab.trust import check_model_name, resolve_inside

__all__ = ["ARCHIVE_SUFFIXES", "MANIFEST", "StoreEntry", "read_entry", "scan_store", "store_entry_name", "unpack"]

MANIFEST = "MAR-INF/MANIFEST.json"
#: archive kinds TorchServe loads from a model store (``.model`` is its legacy name for ``.mar``)
ARCHIVE_SUFFIXES = (".mar", ".model", ".tar.gz")
_DEFAULT_VERSION = "1.0"


@dataclass
class StoreEntry:
    """One model archive (or unarchived folder) of the store."""

    file: str
    path: Path
    kind: str  #: "zip", "tgz" or "folder"
    manifest: dict[str, Any]
    model_name: str
    version: str
    #: model-config.yaml, parsed ({} without one)
    model_config: dict[str, Any] = field(default_factory=dict)
    #: changes whenever the entry's files do
    stamp: str = ""

    @property
    def model(self) -> dict[str, Any]:
        section = self.manifest.get("model")
        return section if isinstance(section, dict) else {}


def store_entry_name(name: str, field: str = "url") -> str:
    """A store entry named by a client: a file or folder name of the store, nothing else."""
    if "://" in name:
        raise InvalidArgument(
            f"{field} {name!r} is a URL; servelab fetches no archives: put the archive in the model store "
            "and name it (e.g. url=my_model.mar)"
        )
    if "/" in name or "\\" in name:
        raise InvalidArgument(f"{field} {name!r} must be the name of an archive or folder in the model store")
    return check_model_name(name, field)


def _default_name(file: str) -> str:
    for suffix in ARCHIVE_SUFFIXES:
        if file.endswith(suffix):
            return file[: -len(suffix)]
    return file


def _stamp(path: Path) -> str:
    if path.is_file():
        st = path.stat()
        return f"{st.st_size}:{st.st_mtime_ns}"
    parts = []
    for p in sorted(path.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            st = p.stat()
            parts.append(f"{p.relative_to(path)}:{st.st_size}:{st.st_mtime_ns}")
    return ";".join(parts)


def _manifest_bytes(path: Path, kind: str) -> tuple[bytes, str]:
    """(MANIFEST.json, the folder inside the archive that holds MAR-INF: "" or "<top>/")."""
    if kind == "folder":
        return (path / MANIFEST).read_bytes(), ""
    if kind == "zip":
        with zipfile.ZipFile(path) as z:
            return z.read(MANIFEST), ""
    with tarfile.open(path, "r:gz") as t:
        for member in t.getmembers():
            name = member.name.removeprefix("./")
            if name == MANIFEST or (name.count("/") == 2 and name.endswith("/" + MANIFEST)):
                handle = t.extractfile(member)
                if handle is not None:
                    return handle.read(), name[: -len(MANIFEST)]
    raise KeyError(MANIFEST)


def _model_config_bytes(path: Path, kind: str, prefix: str, name: str) -> bytes:
    member = f"{prefix}{name}"
    if kind == "folder":
        return resolve_inside(path, name, "manifest configFile", within="the model folder").read_bytes()
    if kind == "zip":
        with zipfile.ZipFile(path) as z:
            return z.read(member)
    with tarfile.open(path, "r:gz") as t:
        handle = t.extractfile(member)
        if handle is None:
            raise KeyError(member)
        return handle.read()


def read_entry(store: Path, file: str) -> StoreEntry:
    """The store entry ``file`` (an archive or a folder of ``store``); InvalidArgument says what is wrong."""
    store_entry_name(file, "model store entry")
    path = resolve_inside(store, file, "model store entry", within="the model store")
    if not path.exists():
        raise NotFound(f"{file} is not in the model store")
    kind = "folder" if path.is_dir() else "tgz" if file.endswith(".tar.gz") else "zip"
    try:
        raw, prefix = _manifest_bytes(path, kind)
        manifest = json.loads(raw)
    except (KeyError, OSError, zipfile.BadZipFile, tarfile.TarError, ValueError) as exc:
        raise InvalidArgument(f"{file}: no readable {MANIFEST} ({exc!s}); build it with torch-model-archiver") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("model", {}), dict):
        raise InvalidArgument(f"{file}: {MANIFEST} must be a JSON object with a 'model' object")
    model = manifest.get("model", {})
    name = str(model.get("modelName") or _default_name(file))
    check_model_name(name, f"{file}: modelName")
    version = str(model.get("modelVersion") or _DEFAULT_VERSION)
    config: dict[str, Any] = {}
    if model.get("configFile"):
        config = _parse_model_config(path, kind, prefix, str(model["configFile"]), file)
    return StoreEntry(file, path, kind, manifest, name, version, config, _stamp(path))


def _parse_model_config(path: Path, kind: str, prefix: str, name: str, file: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(_model_config_bytes(path, kind, prefix, name))
    except (KeyError, OSError, zipfile.BadZipFile, tarfile.TarError, yaml.YAMLError) as exc:
        raise InvalidArgument(f"{file}: its configFile {name!r} cannot be read as YAML: {exc!s}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidArgument(f"{file}: {name} must be a YAML mapping (minWorkers, batchSize, ...)")
    return data


def scan_store(store: Path) -> tuple[list[StoreEntry], dict[str, InvalidArgument]]:
    """Every archive and model folder of ``store`` (hidden files skipped, as TorchServe does), and the
    entries that could not be read with the reason."""
    entries: list[StoreEntry] = []
    errors: dict[str, InvalidArgument] = {}
    for path in sorted(store.iterdir()):
        if path.name.startswith("."):
            continue
        if path.is_file() and not path.name.endswith(ARCHIVE_SUFFIXES):
            continue
        if path.is_dir() and not (path / MANIFEST).is_file():
            continue
        try:
            entries.append(read_entry(store, path.name))
        except (InvalidArgument, NotFound) as exc:
            errors[path.name] = InvalidArgument(exc.message)
    return entries, errors


def unpack(entry: StoreEntry, destination: Path, max_unpacked_bytes: int) -> Path:
    """The entry's model folder: the folder itself, or the archive unpacked into ``destination``."""
    if entry.kind == "folder":
        return entry.path
    if destination.exists():
        shutil.rmtree(destination)
    destination.mkdir(parents=True)
    try:
        if entry.kind == "zip":
            _unzip(entry, destination, max_unpacked_bytes)
        else:
            _untar(entry, destination, max_unpacked_bytes)
    except BaseException:
        shutil.rmtree(destination, ignore_errors=True)
        raise
    found = [p.parent.parent for p in destination.glob("*/" + MANIFEST)] if not (destination / MANIFEST).is_file() else []
    return found[0] if len(found) == 1 else destination


def _check_member(entry: StoreEntry, destination: Path, name: str) -> Path:
    if not name or PurePosixPath(name).is_absolute() or ".." in PurePosixPath(name).parts:
        raise InvalidArgument(f"{entry.file}: member {name!r} would be written outside the model folder")
    return resolve_inside(destination, name, f"{entry.file}: member", within="the unpacked model folder")


def _too_big(entry: StoreEntry, total: int, limit: int) -> InvalidArgument:
    return InvalidArgument(
        f"{entry.file}: unpacks to {total} bytes, more than the {limit} allowed (torchserve.max_unpacked_bytes)"
    )


def _unzip(entry: StoreEntry, destination: Path, limit: int) -> None:
    with zipfile.ZipFile(entry.path) as z:
        members = z.infolist()
        total = sum(m.file_size for m in members)
        if total > limit:
            raise _too_big(entry, total, limit)
        for m in members:
            if stat.S_ISLNK(m.external_attr >> 16):
                raise InvalidArgument(f"{entry.file}: member {m.filename!r} is a symbolic link; archives may hold files only")
            target = _check_member(entry, destination, m.filename)
            if m.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(m) as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)


def _untar(entry: StoreEntry, destination: Path, limit: int) -> None:
    with tarfile.open(entry.path, "r:gz") as t:
        members = t.getmembers()
        total = sum(m.size for m in members if m.isfile())
        if total > limit:
            raise _too_big(entry, total, limit)
        for m in members:
            if not (m.isfile() or m.isdir()):
                raise InvalidArgument(f"{entry.file}: member {m.name!r} is not a file or folder; archives may hold files only")
            target = _check_member(entry, destination, m.name)
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            handle = t.extractfile(m)
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as dst:
                shutil.copyfileobj(handle or io.BytesIO(), dst, 1 << 20)
