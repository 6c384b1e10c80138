"""TorchServe 0.12 as a peer: its own venv, a ``.mar`` built from the TorchScript model and our
batch-aware handler, registered with batching through the management API.

Quiet by design: ``--ncs``, a log4j2 config that keeps only warnings (in the work folder), metrics in
Prometheus mode with system metrics off, every port free and on 127.0.0.1, and ``TMPDIR`` private so
TorchServe's global pid file cannot collide with another TorchServe on the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

from servelab.bench.net import HOST, free_ports, http_status, wait_until
from servelab.bench.peers._venv import TORCH_PIN, PeerEnv
from servelab.bench.peers.base import Endpoint, ModelArtefacts, Peer
from servelab.errors import InvalidArgument, Unavailable

__all__ = ["REQUIREMENTS", "TorchServePeer"]

REQUIREMENTS = (
    "torchserve==0.12.0",
    "torch-model-archiver==0.12.0",
    TORCH_PIN,
    "numpy",
    "psutil",
    "packaging",
    "pyyaml",
)
JAVA_HINT = "TorchServe needs Java 17 on PATH: apt-get install -y openjdk-17-jre-headless"
_HANDLER = Path(__file__).with_name("_torchserve_handler.py")

_LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <File name="ts_log" fileName="{logs}/ts_log.log"><PatternLayout pattern="%d{{ISO8601}} [%-5p] %t %c - %m%n"/></File>
  </Appenders>
  <Loggers>
    <Logger name="ACCESS_LOG" level="off"/>
    <Logger name="MODEL_LOG" level="warn" additivity="false"><AppenderRef ref="ts_log"/></Logger>
    <Logger name="TS_METRICS" level="off"/>
    <Logger name="MODEL_METRICS" level="off"/>
    <Logger name="io.netty" level="error"/>
    <Logger name="org.pytorch.serve" level="warn" additivity="false"><AppenderRef ref="ts_log"/></Logger>
    <Root level="warn"><AppenderRef ref="ts_log"/></Root>
  </Loggers>
</Configuration>
"""


class TorchServePeer(Peer):
    """TorchServe with one model; ``batch_size`` and ``max_batch_delay_ms`` are TorchServe's own knobs."""

    name = "torchserve"

    def __init__(
        self,
        peers_dir: Path,
        work_dir: Path | None = None,
        progress: Any = None,
        batch_size: int = 8,
        max_batch_delay_ms: int = 5,
        workers: int = 1,
        job_queue_size: int = 1000,
    ) -> None:
        super().__init__(work_dir, progress)
        self.env = PeerEnv(peers_dir, self.name, REQUIREMENTS)
        self.batch_size = batch_size
        self.max_batch_delay_ms = max_batch_delay_ms
        self.workers = workers
        self.job_queue_size = job_queue_size
        self.management_url = ""

    def install(self) -> None:
        if shutil.which("java") is None:
            raise Unavailable(JAVA_HINT)
        self.env.ensure(self.progress)

    def prepare(self, artefacts: ModelArtefacts) -> None:
        if artefacts.torchscript is None:
            raise InvalidArgument(f"{self.name} serves TorchScript; model {artefacts.name!r} has no model.pt")
        if len(artefacts.inputs) != 1:
            raise InvalidArgument(
                f"{self.name}'s handler takes one input tensor; {artefacts.name!r} has {len(artefacts.inputs)}"
            )
        self.artefacts = artefacts
        build = self.work_dir / "build"
        build.mkdir(parents=True, exist_ok=True)
        (build / "io.json").write_text(json.dumps({"input_dims": list(artefacts.inputs[0].dims)}))
        self._archive(artefacts.name, artefacts.torchscript, _HANDLER, [build / "io.json"])

    def _archive(self, name: str, serialized: Path, handler: Path, extra_files: list[Path]) -> None:
        """Build ``model-store/<name>.mar`` with torch-model-archiver (the handler is copied in first)."""
        build = self.work_dir / "build"
        store = self.work_dir / "model-store"
        build.mkdir(parents=True, exist_ok=True)
        store.mkdir(parents=True, exist_ok=True)
        shutil.copy(handler, build / "servelab_handler.py")
        argv = [
            str(self.env.bin("torch-model-archiver")), "--model-name", name, "--version", "1.0",
            "--serialized-file", str(serialized), "--handler", str(build / "servelab_handler.py"),
            "--extra-files", ",".join(str(p) for p in extra_files), "--export-path", str(store), "--force",
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            raise Unavailable(
                f"torch-model-archiver failed ({done.returncode}): {(done.stderr or done.stdout)[-1500:]}"
            )

    def _write_config(self, ports: list[int]) -> Path:
        logs = self.work_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "log4j2.xml").write_text(_LOG4J2.format(logs=logs))
        props = {
            "inference_address": f"http://{HOST}:{ports[0]}",
            "management_address": f"http://{HOST}:{ports[1]}",
            "metrics_address": f"http://{HOST}:{ports[2]}",
            "grpc_inference_address": HOST,
            "grpc_management_address": HOST,
            "grpc_inference_port": str(ports[3]),
            "grpc_management_port": str(ports[4]),
            "model_store": str(self.work_dir / "model-store"),
            "default_workers_per_model": str(self.workers),
            "job_queue_size": str(self.job_queue_size),
            "number_of_netty_threads": "2",
            "netty_client_threads": "2",
            "metrics_mode": "prometheus",
            "disable_system_metrics": "true",
            "async_logging": "true",
            "default_response_timeout": "60",
            "install_py_dep_per_model": "false",
            "vmargs": "-Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        }
        path = self.work_dir / "config.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def start(self) -> Endpoint:
        assert self.artefacts is not None, "prepare() first"
        ports = free_ports(5)
        config = self._write_config(ports)
        tmp = self.work_dir / "tmp"
        tmp.mkdir(exist_ok=True)
        env = {**os.environ, "TMPDIR": str(tmp), "TEMP": str(tmp), "LOG_LOCATION": str(self.work_dir / "logs"),
               "METRICS_LOCATION": str(self.work_dir / "logs"), "PATH": f"{self.env.root / 'bin'}:{os.environ.get('PATH', '')}"}  # fmt: skip
        argv = [
            str(self.env.bin("torchserve")), "--start", "--foreground", "--ncs", "--disable-token-auth",
            "--enable-model-api", "--ts-config", str(config), "--model-store", str(self.work_dir / "model-store"),
            "--log-config", str(self.work_dir / "log4j2.xml"),
        ]  # fmt: skip
        proc = self._launch(argv, cwd=self.work_dir, env=env)
        url = f"http://{HOST}:{ports[0]}"
        self.management_url = f"http://{HOST}:{ports[1]}"
        self._wait_http(f"{url}/ping", 120.0, lambda s, b: s == 200 and b"Healthy" in b)
        self._register()
        return Endpoint(url=url, kind="torchserve", model=self.artefacts.name, pid=proc.pid,
                        extra={"management": self.management_url, "metrics": f"http://{HOST}:{ports[2]}",
                               "grpc": f"{HOST}:{ports[3]}"})  # fmt: skip

    def _register(self) -> None:
        assert self.artefacts is not None and self.process is not None
        name = self.artefacts.name
        query = urllib.parse.urlencode({
            "url": f"{name}.mar", "model_name": name, "batch_size": self.batch_size,
            "max_batch_delay": self.max_batch_delay_ms, "initial_workers": self.workers, "synchronous": "true",
        })  # fmt: skip
        status, body = http_status(f"{self.management_url}/models?{query}", "POST", None, timeout_s=180.0)
        if status != 200:
            raise Unavailable(
                f"TorchServe did not register {name} (HTTP {status}): {body[:300]!r}\n{self.process.log_tail()}"
            )
        wait_until(self._worker_ready, 120.0, f"TorchServe worker for {name}", self.process.exited)

    def _worker_ready(self) -> bool:
        assert self.artefacts is not None
        status, body = http_status(f"{self.management_url}/models/{self.artefacts.name}")
        if status != 200:
            return False
        try:
            described = json.loads(body)
        except ValueError:
            return False
        return any(w.get("status") == "READY" for m in described for w in m.get("workers", []))
