"""What the trust-boundary tests share: a repository with traps pointing out of it, a watched folder
outside it, and a watcher that reports every open the kernel sees there.

The watcher uses inotify (Linux), so it sees opens by native code too (ONNX Runtime, OpenVINO,
numpy's memory maps), not only Python's ``open``: "no file outside the repository was opened" is
what the kernel reports, not what the server says.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.ident import IDENT_CONFIG, ident_model, ident_onnx_bytes

__all__ = ["CUSTOM_MODULE", "OpenWatch", "TrustLayout", "build_trust_layout"]

_IN_ACCESS, _IN_MODIFY, _IN_CLOSE_WRITE, _IN_OPEN = 0x1, 0x2, 0x8, 0x20
_IN_MOVED_TO, _IN_CREATE, _IN_DELETE, _IN_ISDIR = 0x80, 0x100, 0x200, 0x40000000
_MASK = _IN_ACCESS | _IN_MODIFY | _IN_CLOSE_WRITE | _IN_OPEN | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
_NAMES = {_IN_ACCESS: "read", _IN_MODIFY: "write", _IN_CLOSE_WRITE: "close-write", _IN_OPEN: "open",
          _IN_MOVED_TO: "moved-in", _IN_CREATE: "create", _IN_DELETE: "delete"}
_EVENT = struct.Struct("iIII")


class OpenWatch:
    """inotify watches on a folder and its sub-folders; :meth:`events` drains what happened since."""

    def __init__(self, root: Path) -> None:
        self._libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self._fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self._dirs: dict[int, Path] = {}
        for folder in [root, *(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())]:
            wd = self._libc.inotify_add_watch(self._fd, str(folder).encode(), _MASK)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {folder} failed")
            self._dirs[wd] = folder

    def events(self) -> list[str]:
        """Every event since the last call, as 'open <path>' lines (directory listings included)."""
        out: list[str] = []
        while select.select([self._fd], [], [], 0)[0]:
            try:
                buf = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            offset = 0
            while offset < len(buf):
                wd, mask, _, length = _EVENT.unpack_from(buf, offset)
                name = buf[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0").decode()
                offset += _EVENT.size + length
                kinds = [n for bit, n in _NAMES.items() if mask & bit]
                path = self._dirs.get(wd, Path("?")) / name
                out.append(f"{'/'.join(kinds)}{' dir' if mask & _IN_ISDIR else ''} {path}")
        return out

    @contextlib.contextmanager
    def nothing_touched(self) -> Iterator[None]:
        """Fail if anything in the watched folder is opened, read, written or created inside the block
        (checked also when the block fails, so a wrong status cannot hide a file that was read)."""
        self.events()
        try:
            yield
        finally:
            touched = self.events()
            assert not touched, "files outside the repository were touched:\n" + "\n".join(touched)

    def close(self) -> None:
        os.close(self._fd)


@dataclass(frozen=True)
class TrustLayout:
    repo: Path
    #: the watched folder outside the repository, holding files worth stealing or running
    outside: Path
    #: a folder (not in the repository) on the server's PYTHONPATH with a custom backend module
    custom: Path
    #: written by the custom backend module when it is imported
    marker: Path


CUSTOM_MODULE = "trust_marker_backend"
_CUSTOM_SOURCE = '''\
"""A custom backend: leaves a marker when imported, then serves like the ONNX Runtime backend."""
from pathlib import Path

from servelab.backends.onnxruntime import OnnxRuntimeBackend

Path({marker!r}).write_text("imported")


class Echo(OnnxRuntimeBackend):
    pass
'''


def build_trust_layout(root: Path) -> TrustLayout:
    """``root/models`` (the repository), ``root/outside`` (watched) and ``root/custom`` (importable)."""
    repo, outside, custom = root / "models", root / "outside", root / "custom"
    model = ident_onnx_bytes()
    for name in ("ident", "spare"):
        ident_model(repo, name)
    (outside / "graph").mkdir(parents=True)
    (outside / "model.onnx").write_bytes(model)
    (outside / "labels.txt").write_text("stolen0\nstolen1\nstolen2\nstolen3\n")
    (outside / "secret.txt").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (outside / "graph" / "manifest.json").write_text('{"format": "servelab-graph", "version": 1}')
    (outside / "model.py").write_text(f"open({str(outside / 'ran')!r}, 'w').write('ran')\n")
    # traps inside the repository that lead out of it
    (repo / "ident" / "1" / "linked.onnx").symlink_to(outside / "model.onnx")
    (repo / "ident" / "linked_labels.txt").symlink_to(outside / "labels.txt")
    (repo / "ident" / "graph_link").symlink_to(outside / "graph")
    (repo / "linked" / "1").mkdir(parents=True)
    (repo / "linked" / "1" / "model.onnx").symlink_to(outside / "model.onnx")
    (repo / "linked" / "config.pbtxt").write_text(IDENT_CONFIG.replace(', label_filename: "labels.txt"', ""))
    (repo / "escaped").mkdir()
    (repo / "escaped" / "1").symlink_to(outside, target_is_directory=True)
    custom.mkdir()
    marker = root / "custom_backend_imported"
    (custom / f"{CUSTOM_MODULE}.py").write_text(_CUSTOM_SOURCE.format(marker=str(marker)))
    return TrustLayout(repo, outside, custom, marker)

