"""The server assembly: repository -> registry -> DataPlane, served on every port from ONE event loop.

- HTTP port: OIP REST (+ Triton extensions), TF Serving REST, TorchServe inference, ``/metrics``.
- gRPC port: OIP gRPC (``servelab.frontends.grpc``, imported lazily; skipped with a log line if absent).
- metrics port: ``/metrics`` only. management port: TorchServe's management API.

Start-up models load in a worker thread, so liveness answers while readiness is still false. SIGTERM
or SIGINT stops accepting, lets in-flight requests finish, closes the registry (which drains every
model) and returns, all within ``exit_timeout_s``: worker processes still busy at the end are killed,
so a stuck python model cannot hold the exit. A second SIGINT forces the exit. A watchdog logs every
stall of the event loop over 100 ms. Port 0 picks a
free port; the bound ports are in :attr:`Server.ports`, logged, and printed as one line
``SERVELAB_PORTS {json}`` on stdout; ``SERVELAB_READY {"ready": bool}`` follows once the start-up
models are loaded (or failed to).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import signal
import socket
import sys
from collections.abc import Iterator
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry

from servelab.config.settings import ControlMode, ServerSettings
from servelab.core.dataplane import DataPlane
from servelab.core.records import ModelState
from servelab.core.registry import ModelRegistry
from servelab.core.workers import WorkerPool
from servelab.frontends.auth import (
    build_door,
    grpc_interceptors,
    grpc_server_credentials,
    grpc_ssl_context,
    http_ssl_options,
)
from servelab.frontends.http_protocol import bounded_protocol
from servelab.frontends.process_group import (
    GroupMember,
    GroupSharedMemory,
    ProcessGroup,
    check_group_settings,
)
from servelab.frontends.rest.app import create_app, create_management_app, create_metrics_app
from servelab.frontends.shared_memory import SharedMemory
from servelab.frontends.watchdog import watch_loop
from servelab.metrics import ServerMetrics
from servelab.metrics.torchserve import TorchServeCollector
from servelab.repository import ModelRepository
from servelab.repository.tfserving import TfServingRepository
from servelab.repository.torchserve import TorchServeRepository

__all__ = ["Server", "serve_copy"]

log = logging.getLogger("servelab.server")

#: of exit_timeout_s, kept for unloading models and killing workers after the front-ends stopped
_UNLOAD_SHARE = 0.25
_UNLOAD_MAX_S = 2.0


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: the Server owns SIGTERM/SIGINT for every port."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _bind(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:  # the processes of one server (--processes) share the port; the kernel spreads connections
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot bind {host}:{port}: {exc.strerror}") from exc
    sock.set_inheritable(True)
    return sock


class Server:
    """Every front-end of one servelab process. ``await Server(settings).serve()`` runs until signalled."""

    def __init__(self, settings: ServerSettings, metrics_registry: CollectorRegistry | None = None,
                 member: GroupMember | None = None) -> None:
        """Raises ``AuthSetupError`` (a ValueError) when keys or TLS cannot be set up as configured, and a
        ValueError when ``settings.processes`` > 1 with what a process group cannot share.
        ``member``: this process is a copy started by a leader (frontends.process_group)."""
        check_group_settings(settings)
        self.settings = settings
        #: the leader's side of ``--processes`` N > 1 (None in a copy and in a single process)
        self.group = (ProcessGroup.create(settings.processes, serve_copy)
                      if member is None and settings.processes > 1 else None)  # fmt: skip
        #: this process's place among several on the same ports (None in a single process)
        self.member = member if member is not None else (self.group.member if self.group else None)
        #: keys and restricted APIs, checked at every port's door (frontends/auth)
        self.door = build_door(settings)
        self._ssl_options = http_ssl_options(settings.tls)
        self._grpc_credentials = grpc_server_credentials(settings.tls)
        #: S1 registers its collectors here; served on /metrics of the HTTP and metrics ports
        self.metrics_registry = metrics_registry if metrics_registry is not None else CollectorRegistry()
        tfs = settings.tfserving
        #: a TF Serving model config instead of a repository: polled on TF Serving's own schedule
        self.tfserving = TfServingRepository.from_settings(tfs) if tfs.config_file else None
        #: a TorchServe model store: models load as load_models says, register/unregister load the others
        self.torchserve = (TorchServeRepository.from_settings(settings.torchserve, settings.workers.max_workers_per_model,
                                                              settings.limits.request_timeout_s)
                           if settings.torchserve.model_store else None)  # fmt: skip
        self._startup_models = (self.torchserve.startup_models(settings.torchserve.load_models) if self.torchserve
                                else list(settings.load_models))  # fmt: skip
        mode = ControlMode.POLL if self.tfserving else ControlMode.EXPLICIT if self.torchserve else settings.model_control_mode
        self.registry = ModelRegistry(
            self.tfserving or self.torchserve or ModelRepository(
                list(settings.model_repository), allow_custom_backends=settings.allow_custom_backends,
                auto_complete=settings.auto_complete_config),
            mode,
            max_tensor_elements=settings.limits.max_tensor_elements,
            drain_timeout_s=settings.exit_timeout_s,
            poll_secs=tfs.poll_tick_s if self.tfserving else settings.repository_poll_secs,
            workers=WorkerPool(settings.workers, settings.limits.request_timeout_s),
        )
        self.dataplane = DataPlane(
            self.registry,
            request_timeout_s=settings.limits.request_timeout_s,
            strict_readiness=settings.strict_readiness,
            server_name=settings.server_name,
            routing=settings.routing,
        )
        #: system shared-memory regions clients register; one set for the REST and gRPC ports
        self.shared_memory = SharedMemory()
        if self.member is not None:
            self._join_group(self.member)
        #: Triton's nv_* families, latency and batch-size histograms, process and GPU metrics
        self.metrics = ServerMetrics(self.metrics_registry, self.registry, routing=self.dataplane.router,
                                     statistics=self.dataplane.statistics if self.member else None)
        self.registry.custom_metrics = self.metrics.custom  # python models' pb_utils.MetricFamily
        self.metrics_registry.register(TorchServeCollector(self.registry))  # TorchServe's names, for its scrapers
        self.ports: dict[str, int] = {}
        self._uvicorns: list[_Uvicorn] = []
        self._grpc: Any = None
        self._grpc_torchserve: list[Any] = []
        self._stop: asyncio.Event | None = None
        self._signals = 0
        self._doors_open = False

    def _join_group(self, member: GroupMember) -> None:
        """Statistics and control shared with the other processes: what each answers when asked."""
        dp, shm, local = self.dataplane, self.shared_memory, self.shared_memory.system
        self.dataplane.siblings = member
        shm.system = GroupSharedMemory(local, member)  # type: ignore[assignment]  # the same methods, passed on
        member.handlers.update({
            "models": lambda m: [r.name for r in self.registry.records() if r.state is ModelState.READY],
            "ready": lambda m: self._doors_open and dp.ready(),
            "statistics": lambda m: dp.local_statistics(m["name"], m["version"]),
            "load": lambda m: dp.local_load_model(m["name"], m["config_json"], m["files"]),
            "unload": lambda m: dp.local_unload_model(m["name"], m["unload_dependents"]),
            "set_default": lambda m: dp.rollouts.set_default(m["name"], m["version"]),
            "shm_register": lambda m: local.register(m["name"], m["key"], m["offset"], m["byte_size"]),
            "shm_unregister": lambda m: local.unregister(m["name"]),
        })

    # ----- control -----
    def request_stop(self) -> None:
        """Begin a graceful stop (what SIGTERM/SIGINT do); a second call forces it."""
        self._signals += 1
        if self._signals > 1:
            log.warning("second stop signal: closing connections without waiting")
            for u in self._uvicorns:
                u.force_exit = True
        if self._stop is not None:
            self._stop.set()

    async def serve(self) -> None:
        self._stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)
        if self.member is not None:
            self.member.serve()
        member = self.member
        copy = member is not None and self.group is None
        if member is not None and copy and member.restarted:  # what the leader serves now, not its start-up list
            self._startup_models = await asyncio.to_thread(member.ask, 0, "models")
        if copy:  # a copy opens its ports once its models are loaded: no connection reaches it before
            loader = asyncio.create_task(self._load_startup_models(announce=False))
            await loader
        tasks = self._start_http()
        await self._start_grpc()
        self._doors_open = True
        watchers: list[asyncio.Task[None]] = [asyncio.create_task(watch_loop(), name="loop-watchdog")]
        if not copy:
            if self.group is not None:
                self.group.start(self.settings, self.ports)
                watchers.append(asyncio.create_task(self.group.watch(), name="process-group"))
            self._announce()
            loader = asyncio.create_task(self._load_startup_models())
        await self._stop.wait()
        log.info("stopping: no new connections; waiting up to %.0f s for in-flight requests",
                 self.settings.exit_timeout_s)
        try:
            if self.group is not None:
                group_stop = asyncio.create_task(self.group.stop(self._frontend_grace_s()))
            await self._shutdown(tasks, loader)
            if self.group is not None:
                await group_stop
        finally:
            for w in watchers:
                w.cancel()
            if self.member is not None and self.group is None:
                self.member.close()

    # ----- start -----
    def _uvicorn(self, app: Any) -> _Uvicorn:
        limits = self.settings.limits
        protocol, max_connections = bounded_protocol(limits, ports=3)  # header timer, connection ceiling
        config = uvicorn.Config(
            app,
            loop="uvloop",
            http=protocol,
            lifespan="off",
            access_log=False,
            log_config=None,
            timeout_graceful_shutdown=self._frontend_grace_s(),  # type: ignore[arg-type]  # a float works
            timeout_keep_alive=limits.http_keep_alive_timeout_s,
            limit_concurrency=max_connections + 1,  # uvicorn counts the asking connection: 503 past the cap
            **self._ssl_options,
        )
        server = _Uvicorn(config)
        self._uvicorns.append(server)
        return server

    def _start_http(self) -> list[asyncio.Task[None]]:
        s = self.settings
        apps = {
            "http": create_app(self.dataplane, s, self.metrics_registry, self.door, shared_memory=self.shared_memory),
            "metrics": create_metrics_app(self.metrics_registry, self.door),
            "management": create_management_app(self.dataplane, s, self.door),
        }
        wanted = {"http": s.http_port, "metrics": s.metrics_port, "management": s.management_port}
        tasks: list[asyncio.Task[None]] = []
        for name, app in apps.items():
            sock = _bind(s.host, wanted[name], reuse_port=self.member is not None)
            self.ports[name] = sock.getsockname()[1]
            tasks.append(asyncio.create_task(self._uvicorn(app).serve(sockets=[sock]), name=f"uvicorn-{name}"))
        return tasks

    async def _start_grpc(self) -> None:
        try:
            module = importlib.import_module("servelab.frontends.grpc")
        except ImportError as exc:
            log.warning("gRPC front-end not available (%s): serving REST only", exc)
            return
        if self.settings.grpc_door == "h2":
            await self._start_h2()
        else:
            self._grpc = await module.start_grpc_server(
                self.dataplane, self.settings.host, self.settings.grpc_port,
                max_message_bytes=self.settings.limits.max_body_bytes, limits=self.settings.limits,
                interceptors=grpc_interceptors(self.door),
                credentials=self._grpc_credentials,
                tfserving=self.tfserving,
                shared_memory=self.shared_memory,
                reuse_port=self.member is not None,
            )
            self.ports["grpc"] = int(getattr(self._grpc, "servelab_bound_port", self.settings.grpc_port))
        for name, port in self.settings.torchserve.grpc_ports().items():  # TorchServe's own gRPC ports
            server = await module.start_torchserve_grpc_server(
                name, self.dataplane, self.settings, port,
                interceptors=grpc_interceptors(self.door), credentials=self._grpc_credentials)
            self._grpc_torchserve.append(server)
            self.ports[name] = int(server.servelab_bound_port)

    async def _start_h2(self) -> None:
        """The lean HTTP/2 door on the gRPC port (grpc_door h2), with the same TLS as grpcio would have."""
        from servelab.frontends.grpc.h2.server import start_h2_server

        self._grpc = await start_h2_server(
            self.dataplane, self.settings.host, self.settings.grpc_port,
            max_message_bytes=self.settings.limits.max_body_bytes, limits=self.settings.limits,
            interceptors=grpc_interceptors(self.door), tfserving=self.tfserving,
            shared_memory=self.shared_memory, reuse_port=self.member is not None,
            ssl=grpc_ssl_context(self.settings.tls),
        )
        self.ports["grpc"] = self._grpc.port

    def _announce(self) -> None:
        log.info("servelab listening on %s: %s", self.settings.host,
                 ", ".join(f"{k} {v}" for k, v in self.ports.items()))
        print("SERVELAB_PORTS " + json.dumps(self.ports), flush=True, file=sys.stdout)
        if self.group is not None:  # the PIDs of every process serving these ports, the leader first
            print("SERVELAB_PROCESSES " + json.dumps({"pids": self.group.pids}), flush=True, file=sys.stdout)

    async def _load_startup_models(self, announce: bool = True) -> None:
        try:
            await asyncio.to_thread(self.dataplane.startup, self._startup_models)
        except Exception:
            log.exception("loading the start-up models failed")
        else:
            log.info("start-up models loaded; ready=%s", self.dataplane.ready())
        if not announce:
            return
        ready = self.dataplane.ready()
        if self.group is not None:  # every copy loaded its models and opened its ports
            copies = await self.group.wait_ready(max(60.0, self.settings.limits.request_timeout_s))
            if not copies:
                log.error("not every server process became ready")
            ready = ready and copies
        # start-up is over: what a supervisor (or a test) waits on instead of polling /v2/health/ready
        print("SERVELAB_READY " + json.dumps({"ready": ready}), flush=True, file=sys.stdout)

    # ----- stop -----
    def _frontend_grace_s(self) -> float:
        """How long front-ends wait for in-flight requests: exit_timeout_s less the unloading share."""
        total = self.settings.exit_timeout_s
        return max(0.0, total - min(_UNLOAD_MAX_S, total * _UNLOAD_SHARE))

    async def _shutdown(self, tasks: list[asyncio.Task[None]], loader: asyncio.Task[None]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.exit_timeout_s
        for u in self._uvicorns:
            u.should_exit = True
        stops: list[Any] = list(tasks)
        if self._grpc is not None:
            stops.append(self._grpc.stop(self._frontend_grace_s()))
        stops.extend(g.stop(self._frontend_grace_s()) for g in self._grpc_torchserve)
        results = await asyncio.gather(*stops, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                log.error("a front-end failed while stopping: %r", result)
        if not loader.done():
            log.info("waiting for start-up model loading to finish before closing the registry")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(loader), max(0.0, deadline - loop.time()))
        left = max(0.0, deadline - loop.time())
        try:
            await asyncio.wait_for(asyncio.to_thread(self.dataplane.close, left), left + 1.0)
        except TimeoutError:
            log.error("models did not unload within exit_timeout_s: killing every worker process")
        self.registry.workers.kill_all()
        self.shared_memory.close()
        log.info("servelab stopped")


def serve_copy(settings: ServerSettings, member: GroupMember) -> None:
    """The main of a copy a leader started (``--processes``): the same server, on the leader's ports."""
    import uvloop

    uvloop.run(Server(settings, member=member).serve())
