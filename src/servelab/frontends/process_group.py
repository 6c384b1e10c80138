"""Several server processes on the same ports (``--processes N``, SO_REUSEPORT), acting as one server.

One Python process serves requests on one core: its event loop runs decode, the data plane and encode
for every request. With ``processes`` > 1 the first process (the *leader*, the one started) binds every
port, then starts ``processes - 1`` copies of itself that bind the same ports with SO_REUSEPORT; the
kernel spreads new connections over all of them, and each runs its own models (an instance set per
process). What must stay one server's is kept so over a unix socket per process, in a private folder
(mode 0700), answered by a thread of that process (never its event loop, so two processes asking each
other at once cannot deadlock):

- **Statistics** (Triton's statistics extension, which perf_analyzer reads for its server-side line,
  and the ``nv_inference_*`` counters on /metrics): the process asked sums every process's counters.
- **Control**: a model load or unload, a pinned default version, a system shared-memory region
  registered or unregistered, is done by the process asked and then by every other one; the answer
  waits for all of them and names a process that failed.
- **Readiness**: a copy opens its ports only once its start-up models are loaded, so no connection
  reaches a process that cannot answer; the leader says ``SERVELAB_READY`` once every copy has.
- **Crashes**: a copy that dies is started again (the others keep serving its share meanwhile) with the
  models the leader serves then (loads and unloads since the start included; a load's config override is
  not: it loads the repository's); every copy exits with the leader (SIGTERM on the leader's death).

Not shared, and refused or documented instead: rollouts (their gates count one process's answers:
refused with ``--processes`` > 1), latency histograms on /metrics (each process's own), CUDA
shared-memory regions, sequence (stateful) models (a sequence must keep to one connection, as
tritonclient's gRPC streams do), TF Serving and TorchServe model stores (refused at start).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import json
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import socketserver
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servelab.config.settings import ServerSettings
from servelab.errors import ServelabError, Unavailable

__all__ = ["GroupMember", "GroupSharedMemory", "ProcessGroup", "check_group_settings"]

log = logging.getLogger("servelab.server")

_ASK_TIMEOUT_S = 5.0
#: a load on every copy can take as long as a load does
_CONTROL_TIMEOUT_S = 600.0
_RESTART_DELAY_S = 1.0
_MAX_LINE = 256 * 1024 * 1024


def check_group_settings(settings: ServerSettings) -> None:
    """Raise ValueError when ``settings.processes`` > 1 asks for what a process group cannot share."""
    if settings.processes <= 1:
        return
    if settings.tfserving.config_file or settings.torchserve.model_store:
        raise ValueError("--processes > 1 serves a Triton-style model repository only "
                         "(not a TF Serving config or a TorchServe model store)")


def _encode(value: Any) -> Any:
    """JSON for bytes (a load request's files): ``{"$b64": ...}``."""
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$b64": base64.b64encode(bytes(value)).decode()}
    raise TypeError(f"cannot send a {type(value).__name__} to a server process")


def _decode(obj: dict[str, Any]) -> Any:
    return base64.b64decode(obj["$b64"]) if len(obj) == 1 and "$b64" in obj else obj


def _dumps(message: dict[str, Any]) -> bytes:
    return json.dumps(message, default=_encode).encode() + b"\n"


def _sock_path(folder: Path, index: int) -> Path:
    return folder / f"p{index}.sock"


class GroupMember:
    """This process's side: answers its siblings, asks them (statistics, control) and lists them."""

    def __init__(self, folder: Path, index: int, size: int, restarted: bool = False) -> None:
        self.folder = folder
        self.index = index
        self.size = size
        #: a copy started again after it died: it loads what the leader serves now, not the start-up list
        self.restarted = restarted
        self.handlers: dict[str, Callable[[dict[str, Any]], Any]] = {}
        self._server: socketserver.ThreadingUnixStreamServer | None = None

    # ----- answering -----
    def serve(self) -> None:
        """Start answering on this process's socket (a thread per connection)."""
        member = self

        class _Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                line = self.rfile.readline(_MAX_LINE)
                try:
                    message = json.loads(line, object_hook=_decode)
                    handler = member.handlers[message["op"]]
                    reply: dict[str, Any] = {"ok": True, "result": handler(message)}
                except ServelabError as exc:
                    reply = {"ok": False, "error": exc.message}
                except Exception as exc:
                    reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                self.wfile.write(_dumps(reply))

        path = _sock_path(self.folder, self.index)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self._server = socketserver.ThreadingUnixStreamServer(str(path), _Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True, name="group-member").start()

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            with contextlib.suppress(FileNotFoundError):
                _sock_path(self.folder, self.index).unlink()

    # ----- asking -----
    def others(self) -> list[int]:
        return [i for i in range(self.size) if i != self.index]

    def ask(self, index: int, op: str, timeout_s: float = _ASK_TIMEOUT_S, **args: Any) -> Any:
        """``op`` answered by process ``index``; raises Unavailable when it fails or cannot be reached."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            try:
                sock.connect(str(_sock_path(self.folder, index)))
                sock.sendall(_dumps({"op": op, **args}))
                reply = json.loads(sock.makefile("rb").readline(_MAX_LINE), object_hook=_decode)
            except (OSError, ValueError) as exc:
                raise Unavailable(f"server process {index} did not answer {op!r}: {exc}") from None
        if not reply.get("ok"):
            raise Unavailable(f"server process {index}: {reply.get('error')}")
        return reply.get("result")

    def gather(self, op: str, **args: Any) -> list[Any]:
        """``op`` from every other process that answers (one being restarted is left out, and logged)."""
        out = []
        for i in self.others():
            try:
                out.append(self.ask(i, op, **args))
            except Unavailable as exc:
                log.warning("%s", exc.message)
        return out

    def broadcast(self, op: str, **args: Any) -> None:
        """``op`` done by every other process; raises Unavailable naming the first that failed."""
        failures = []
        for i in self.others():
            try:
                self.ask(i, op, timeout_s=_CONTROL_TIMEOUT_S, **args)
            except Unavailable as exc:
                failures.append(exc.message)
        if failures:
            raise Unavailable("; ".join(failures))


class GroupSharedMemory:
    """A process's system shared-memory regions, registered and unregistered in every process (a client's
    next request may come on another connection, to another process); everything else is the local one's."""

    def __init__(self, local: Any, member: GroupMember) -> None:
        self.local = local
        self._member = member

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.local.register(name, key, offset, byte_size)
        self._member.broadcast("shm_register", name=name, key=key, offset=offset, byte_size=byte_size)

    def unregister(self, name: str = "") -> None:
        self.local.unregister(name)
        self._member.broadcast("shm_unregister", name=name)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.local, attr)


def _die_with_parent() -> None:
    """SIGTERM when the leader dies (Linux prctl PR_SET_PDEATHSIG); elsewhere nothing."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _copy(main: Callable[..., None], settings: ServerSettings, member: GroupMember) -> None:
    """A copy's first steps: die with the leader, then the server's main (settings arrive pickled, keys
    included: a JSON dump would mask them)."""
    _die_with_parent()
    main(settings, member)


class ProcessGroup:
    """The leader's side: starts the copies, restarts one that dies, stops them all."""

    def __init__(self, member: GroupMember, copy_main: Callable[..., None]) -> None:
        self.member = member
        #: a copy's main (module level, so that it pickles): ``copy_main(settings, member)``
        self._copy_main = copy_main
        self._ctx = multiprocessing.get_context("spawn")
        self._procs: dict[int, Any] = {}
        self._settings: ServerSettings | None = None
        self._stopping = False

    @classmethod
    def create(cls, size: int, copy_main: Callable[..., None]) -> ProcessGroup:
        folder = Path(tempfile.mkdtemp(prefix="servelab-group-"))  # mode 0700
        return cls(GroupMember(folder, 0, size), copy_main)

    @property
    def pids(self) -> list[int]:
        return [os.getpid(), *(p.pid for _, p in sorted(self._procs.items()))]

    def start(self, settings: ServerSettings, ports: dict[str, int]) -> None:
        """Start every copy on ``ports`` (the ones the leader bound)."""
        concrete = settings.model_copy(update={
            "http_port": ports["http"], "metrics_port": ports["metrics"], "management_port": ports["management"],
            "grpc_port": ports.get("grpc", settings.grpc_port),
        })
        self._settings = concrete
        for i in self.member.others():
            self._spawn(i)

    def _spawn(self, index: int, restarted: bool = False) -> None:
        member = GroupMember(self.member.folder, index, self.member.size, restarted)
        proc = self._ctx.Process(target=_copy, name=f"servelab-{index}", daemon=False,
                                 args=(self._copy_main, self._settings, member))
        proc.start()
        self._procs[index] = proc
        log.info("server process %d started (pid %d)", index, proc.pid)

    async def wait_ready(self, timeout_s: float) -> bool:
        """True once every copy says it is ready (its models loaded, its ports open)."""
        deadline = time.monotonic() + timeout_s
        pending = set(self.member.others())
        while pending and time.monotonic() < deadline:
            for i in list(pending):
                with contextlib.suppress(Unavailable):
                    if await asyncio.to_thread(self.member.ask, i, "ready", 1.0):
                        pending.discard(i)
            if pending:
                await asyncio.sleep(0.1)
        return not pending

    async def watch(self) -> None:
        """Start again a copy that exited while the group was not stopping."""
        while not self._stopping:
            await asyncio.sleep(_RESTART_DELAY_S)
            for i, proc in list(self._procs.items()):
                if not proc.is_alive() and not self._stopping:
                    log.error("server process %d (pid %d) exited with %s: starting it again", i, proc.pid, proc.exitcode)
                    self._spawn(i, restarted=True)

    async def stop(self, timeout_s: float) -> None:
        """SIGTERM every copy, wait up to ``timeout_s``, kill the ones still running."""
        self._stopping = True
        for proc in self._procs.values():
            if proc.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self._procs.values():
            await asyncio.to_thread(proc.join, max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                log.error("server process %s did not stop in time: killing it", proc.pid)
                proc.kill()
                await asyncio.to_thread(proc.join, 1.0)
        self.member.close()
        shutil.rmtree(self.member.folder, ignore_errors=True)
