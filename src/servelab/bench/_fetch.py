"""An unpacked install under ``<peers_dir>/<name>/``, built once from package registries.

Triton and perf_analyzer are C++ programs shipped inside wheels (and one Debian package), not Python
packages servelab can depend on: they are downloaded with ``pip download``, unzipped, never installed into
servelab's environment. :class:`UnpackedInstall` runs those steps with their output in ``install.log`` and
writes a stamp of the recipe (the pinned names) when every step has succeeded, so a half-finished install
is redone and a changed recipe rebuilds the folder. A step that fails raises ``Unavailable`` with the
command, its exit status and the log's tail.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

from servelab.errors import Unavailable

__all__ = ["DownloadFailed", "UnpackedInstall"]

_STAMP = ".servelab-installed"
_NOISE = ("is ignored: it is neither",)  # pip's warnings about absent local indexes in its config


class DownloadFailed(Unavailable):
    """A download step failed (no registry, no network, an unknown pin): the install cannot happen here."""


class UnpackedInstall:
    """The folder ``<peers_dir>/<name>``; ``recipe`` lists what it is built from (its stamp)."""

    def __init__(self, peers_dir: Path, name: str, recipe: Sequence[str]) -> None:
        self.name = name
        self.root = peers_dir.resolve() / name
        self.recipe = list(recipe)
        self.log = self.root / "install.log"
        self.downloads = self.root / "downloads"

    def _digest(self) -> str:
        return hashlib.sha256("\n".join(self.recipe).encode()).hexdigest()

    def is_ready(self) -> bool:
        stamp = self.root / _STAMP
        return stamp.is_file() and stamp.read_text().strip() == self._digest()

    def begin(self, progress: Callable[[str], None]) -> Path:
        """Start from an empty ``<root>/dist`` (downloads are kept: pip reuses them); return it."""
        progress(f"installing {self.name} in {self.root} (first use only): " + " ".join(self.recipe))
        (self.root / _STAMP).unlink(missing_ok=True)
        dist = self.root / "dist"
        shutil.rmtree(dist, ignore_errors=True)
        dist.mkdir(parents=True)
        self.downloads.mkdir(parents=True, exist_ok=True)
        return dist

    def finish(self) -> None:
        (self.root / _STAMP).write_text(self._digest() + "\n")

    def run(
        self, argv: Sequence[str], timeout_s: float = 900.0, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> None:
        """Run one step, its output appended to the install log; Unavailable when it fails."""
        self.root.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(("$ " + " ".join(argv) + "\n").encode())
            out.flush()
            try:
                rc = subprocess.run(
                    list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd, env=env,
                    timeout=timeout_s, check=False,
                ).returncode  # fmt: skip
            except subprocess.TimeoutExpired:
                rc = -1
            except OSError as exc:
                out.write(f"{exc}\n".encode())
                rc = -2
        if rc != 0:
            lines = self.log.read_text(errors="replace").splitlines()[-30:]
            tail = "\n".join(line for line in lines if not any(n in line for n in _NOISE))
            download = "download" in argv or "install" in argv or "update" in argv
            error = DownloadFailed if download else Unavailable
            raise error(
                f"could not install {self.name}: `{' '.join(argv[:4])} ...` exited {rc}"
                + (" (is the package registry reachable?)" if download else "")
                + f". Full log: {self.log}\n{tail[-1500:]}"
            )

    def pip_download(self, requirement: str) -> Path:
        """One wheel, without its dependencies, into ``downloads/``; the path of the file."""
        before = set(self.downloads.iterdir())
        self.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                  "--disable-pip-version-check", "-d", str(self.downloads), requirement])  # fmt: skip
        name = requirement.split("==")[0].replace("-", "_").lower()
        found = [p for p in self.downloads.glob("*.whl") if p.name.lower().startswith(name + "-")]
        new = [p for p in found if p not in before]
        if not found:
            raise Unavailable(f"pip download {requirement} left no wheel in {self.downloads}")
        return (new or sorted(found))[-1]

    def pip_target(
        self, requirements: Sequence[str], target: Path, python_version: str, *, add: bool = False
    ) -> None:
        """Binary wheels for CPython ``python_version`` (not necessarily ours) unpacked into ``target``.

        ``add``: ``target`` already holds packages; install exactly ``requirements`` (no dependencies, so
        what is there stays as it is) and replace an older copy of any of them."""
        tag = python_version.replace(".", "")
        extra = ["--no-deps", "--upgrade"] if add else []
        self.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-compile",
                  "--target", str(target), "--only-binary=:all:", "--implementation", "cp",
                  "--python-version", python_version, "--abi", f"cp{tag}", "--platform", "manylinux_2_28_x86_64",
                  "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64", *extra,
                  *requirements])  # fmt: skip

    def deb_extract(self, package: str, target: Path) -> None:
        """A Debian package's files under ``target`` (``apt-get download`` + ``dpkg -x``: nothing is
        installed on the system). Where apt has no package lists yet (a fresh container), root refreshes
        them once with ``apt-get update`` and tries again."""
        if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
            raise Unavailable(f"{self.name} needs the Debian package {package}; apt-get/dpkg are not here")
        with tempfile.TemporaryDirectory(dir=self.downloads) as tmp:
            try:
                self.run(["apt-get", "download", package], timeout_s=300.0, cwd=Path(tmp))
            except Unavailable:
                if os.geteuid() != 0:
                    raise
                self.run(["apt-get", "update", "-qq"], timeout_s=600.0)
                self.run(["apt-get", "download", package], timeout_s=300.0, cwd=Path(tmp))
            debs = sorted(Path(tmp).glob("*.deb"))
            if not debs:
                raise Unavailable(f"apt-get download {package} left no .deb file")
            self.run(["dpkg", "-x", str(debs[0]), str(target)], timeout_s=120.0)

    @staticmethod
    def unzip(wheel: Path, target: Path, members: Callable[[str], bool] | None = None) -> None:
        """Unpack a wheel (a zip) into ``target``, keeping the executable bit of the files that had it."""
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                if members is not None and not members(info.filename):
                    continue
                path = Path(zf.extract(info, target))
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    path.chmod(mode)
