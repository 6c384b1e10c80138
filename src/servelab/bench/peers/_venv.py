"""A peer's own virtual environment under ``<peers_dir>/<name>/venv``, created on first use.

Peers pin packages that conflict with servelab's (protobuf 6, fastapi < 0.116, uvloop 0.21), so each
gets a venv of its own. A stamp file records the requirements it was built from; the venv is reused
while they match, rebuilt when they change. Any torch requirement must carry the ``torch==2.13.0`` pin.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from servelab.errors import InvalidArgument, Unavailable

__all__ = ["TORCH_PIN", "PeerEnv"]

TORCH_PIN = "torch==2.13.0"
_STAMP = ".servelab-installed"


def _name(requirement: str) -> str:
    """The distribution name of a requirement string, lower-case."""
    match = re.match(r"\s*([A-Za-z0-9_.-]+)", requirement)
    return match.group(1).lower() if match else ""


class PeerEnv:
    """The venv of one peer; ``ensure()`` installs it once, later calls are free."""

    def __init__(
        self, peers_dir: Path, name: str, requirements: Sequence[str], python: str | None = None
    ) -> None:
        bad = [r for r in requirements if _name(r) == "torch" and r.replace(" ", "") != TORCH_PIN]
        if bad:
            raise InvalidArgument(f"peer {name!r}: torch must be pinned as {TORCH_PIN!r}, got {bad}")
        self.name = name
        self.root = peers_dir.resolve() / name / "venv"
        self.requirements = list(requirements)
        self.python_for_venv = python or sys.executable

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def bin(self, script: str) -> Path:
        return self.root / "bin" / script

    def _digest(self) -> str:
        return hashlib.sha256("\n".join(sorted(self.requirements)).encode()).hexdigest()

    def is_ready(self) -> bool:
        stamp = self.root / _STAMP
        return self.python.exists() and stamp.exists() and stamp.read_text().strip() == self._digest()

    def ensure(self, progress: Callable[[str], None] | None = None, timeout_s: float = 1800.0) -> None:
        """Create and fill the venv unless its stamp matches; raise Unavailable saying what failed."""
        if self.is_ready():
            return
        say = progress or (lambda _m: None)
        say(f"installing {self.name}'s own environment in {self.root} (first use only; a few minutes): "
            + " ".join(self.requirements))  # fmt: skip
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.parent.mkdir(parents=True, exist_ok=True)
        log = self.root.parent / "install.log"
        self._run([self.python_for_venv, "-m", "venv", str(self.root)], log, timeout_s)
        self._run([str(self.python), "-m", "pip", "install", "--upgrade", "pip"], log, timeout_s)
        self._run([str(self.python), "-m", "pip", "install", *self.requirements], log, timeout_s)
        (self.root / _STAMP).write_text(self._digest() + "\n")
        say(f"{self.name} environment ready")

    def _run(self, argv: list[str], log: Path, timeout_s: float) -> None:
        with log.open("ab") as out:
            out.write(("$ " + " ".join(argv) + "\n").encode())
            out.flush()
            try:
                rc = subprocess.run(
                    argv, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s, check=False
                ).returncode
            except subprocess.TimeoutExpired:
                rc = -1
        if rc != 0:
            tail = "\n".join(
                line
                for line in log.read_text(errors="replace").splitlines()[-40:]
                if "is ignored: it is neither" not in line
            )
            raise Unavailable(
                f"could not install {self.name}'s environment ({' '.join(argv[-3:])} exited {rc}); "
                f"is PyPI reachable? Full log: {log}\n{tail[-2000:]}"
            )
