"""The ``Peer`` interface: a server that ``servelab compare`` starts, measures through its public
protocol, and stops.

A peer goes through ``install()`` (its own environment, once), ``prepare(artefacts)`` (model files in
its own layout, in a temporary folder), ``start()`` (a process group of its own, readiness polled) and
``stop()`` (that process group, by PID). It is a context manager: ``with peer: endpoint = peer.start()``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from servelab.bench.net import http_status, wait_until

__all__ = ["Endpoint", "ModelArtefacts", "Peer", "PeerProcess", "TensorInfo"]

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One input or output: OIP datatype and dims without the batch dim."""

    name: str
    datatype: str
    dims: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ModelArtefacts:
    """The same model in the formats peers need, and its I/O (the first dim of every tensor is the batch)."""

    name: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    max_batch_size: int = 32
    onnx: Path | None = None
    torchscript: Path | None = None
    python_model: Path | None = None  # a python-backend model's folder (config.pbtxt, <version>/model.py)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a started peer answers: ``url`` is ``http://host:port`` (HTTP kinds) or ``host:port`` (gRPC)."""

    url: str
    kind: str
    model: str
    pid: int | None
    binary: bool = False
    extra: dict[str, str] = field(default_factory=dict)


class PeerProcess:
    """A server process in a new session (its own process group), its output in a log file."""

    def __init__(
        self, argv: Sequence[str], log_path: Path, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self.cwd = cwd
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> int:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv, cwd=self.cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        return self.proc.pid

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def exited(self) -> str | None:
        """None while running; otherwise the exit status and the log's last lines."""
        if self.proc is None or self.proc.poll() is None:
            return None
        return f"exit status {self.proc.returncode}; last log lines:\n{self.log_tail()}"

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM to the process group this object created, then SIGKILL after ``timeout_s``."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        self._signal_group(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._signal_group(pgid, signal.SIGKILL)
            self.proc.wait(timeout=5.0)
        # Children that outlived the leader (workers) still carry the group id.
        self._signal_group(pgid, signal.SIGKILL)
        self.proc = None

    @staticmethod
    def _signal_group(pgid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


class Peer(ABC):
    """A peer server. Subclasses set ``name`` and implement ``prepare``, ``start``."""

    name: str = "peer"

    def __init__(self, work_dir: Path | None = None, progress: Progress | None = None) -> None:
        self._own_work_dir = work_dir is None
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix=f"servelab-{self.name}-"))
        self.progress: Progress = progress or (lambda _msg: None)
        self.process: PeerProcess | None = None
        self.artefacts: ModelArtefacts | None = None

    def install(self) -> None:
        """Make sure the peer's own environment exists (default: nothing to install)."""

    @abstractmethod
    def prepare(self, artefacts: ModelArtefacts) -> None:
        """Lay the model out the way this peer wants it, under ``work_dir``."""

    @abstractmethod
    def start(self) -> Endpoint:
        """Start the server, wait until it is ready to serve the model, return where it answers."""

    def stop(self) -> None:
        """Stop the process group started by ``start`` (idempotent)."""
        if self.process is not None:
            self.process.stop()
            self.process = None

    def cleanup(self) -> None:
        """Remove the temporary work folder when this object created it."""
        if self._own_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def _launch(
        self, argv: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> PeerProcess:
        self.process = PeerProcess(argv, self.work_dir / "logs" / f"{self.name}.log", cwd=cwd, env=env)
        self.process.start()
        return self.process

    def _wait_http(self, url: str, timeout_s: float, ok: Callable[[int, bytes], bool] | None = None) -> None:
        """Poll ``GET url`` until it answers 200 (or ``ok(status, body)``)."""
        assert self.process is not None
        check = ok or (lambda status, _body: status == 200)

        def ready() -> bool:
            status, body = http_status(url)
            return check(status, body)

        wait_until(ready, timeout_s, f"{self.name} ({url})", self.process.exited)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        self.cleanup()
