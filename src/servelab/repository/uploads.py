"""Model folders written from a load request's ``file:<path>`` parameters (Triton's override directory).

Triton's load API may carry the model's files: ``"file:1/model.onnx": <base64 content>`` beside the
required ``config``; the files form the folder the model is loaded from, instead of its folder in the
repository. Here each upload goes into a fresh private temporary folder named after the model, every
``file:`` path is resolved inside it by :func:`servelab.trust.resolve_inside` before anything is
written, and the folder lives exactly as long as the model serves from it: it is removed when the
load fails, when the model is loaded again (from the repository or from new files) and on unload.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from servelab.errors import InvalidArgument
from servelab.trust import resolve_inside

__all__ = ["FILE_PREFIX", "UploadedFolders"]

log = logging.getLogger("servelab.repository")

FILE_PREFIX = "file:"
_TEMP_PREFIX = "servelab-upload-"


class UploadedFolders:
    """Uploaded model folders: at most one in use per model, and the one a load is trying.

    The registry serialises loads, so per model there is at most one upload being tried
    (``pending``) beside the one serving (``in_use``). :meth:`settle` ends each attempt.
    """

    def __init__(self) -> None:
        self._in_use: dict[str, Path] = {}
        self._pending: dict[str, Path] = {}
        self._lock = threading.Lock()

    def write(self, name: str, files: Mapping[str, bytes]) -> Path:
        """A new folder ``<tmp>/<name>/`` holding ``files`` (path relative to the model folder -> content)."""
        if not files:
            raise InvalidArgument(f"model '{name}': the load request's file overrides are empty")
        base = Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX))
        folder = base / name
        folder.mkdir()
        with self._lock:
            replaced = self._pending.pop(name, None)
            self._pending[name] = folder
        if replaced is not None:
            _remove(replaced)
        for relative, content in files.items():
            _write_one(folder, relative, content)
        log.info("model %s: %d uploaded file(s) written to %s", name, len(files), folder)
        return folder

    def folders(self, name: str) -> list[Path]:
        """The uploaded folders of ``name`` that exist now (for redacting messages about it)."""
        with self._lock:
            return [f for f in (self._in_use.get(name), self._pending.get(name)) if f is not None]

    def settle(self, name: str, serving: Path | None, loaded: bool) -> None:
        """End a load attempt of ``name``. ``loaded``: the model now serves from ``serving`` (its folder in
        the repository or the upload just tried); otherwise it keeps what it served before. An upload
        no longer served is removed."""
        with self._lock:
            pending = self._pending.pop(name, None)
            old = self._in_use.get(name)
            if loaded:
                self._in_use.pop(name, None)
                if serving is not None and serving == pending:
                    self._in_use[name], pending = serving, None
        for folder in (pending, old if loaded and old != serving else None):
            if folder is not None:
                _remove(folder)

    def release(self, name: str) -> None:
        """``name`` was unloaded: remove the upload it served from, if any."""
        with self._lock:
            folders = [self._in_use.pop(name, None), self._pending.pop(name, None)]
        for folder in folders:
            if folder is not None:
                _remove(folder)


def _remove(folder: Path) -> None:
    shutil.rmtree(folder.parent, ignore_errors=True)


def _write_one(folder: Path, relative: str, content: bytes) -> None:
    field = f"parameter '{FILE_PREFIX}{relative}'"
    target = resolve_inside(folder, relative, field)
    if target == folder.resolve():
        raise InvalidArgument(f"{field} names the model folder itself; expected a file path such as '1/model.onnx'")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    except (IsADirectoryError, NotADirectoryError, FileExistsError):
        raise InvalidArgument(f"{field} collides with another uploaded path (a file and a folder of one name)") from None
