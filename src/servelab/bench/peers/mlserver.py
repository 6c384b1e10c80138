"""Seldon MLServer 1.7.1 as a peer: its own venv, our onnxruntime ``MLModel`` runtime, adaptive batching.

``uvloop==0.21.0`` is pinned because MLServer 1.7.1's worker process crashes at start with uvloop 0.22+
("There is no current event loop"). MLServer speaks OIP REST (JSON only) and gRPC (with
``raw_input_contents``), so servelab's OIP clients drive it; ``start(protocol=...)`` picks which one the
returned endpoint names, and ``extra`` carries the other address.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from servelab.bench.net import HOST, free_ports
from servelab.bench.peers._venv import PeerEnv
from servelab.bench.peers.base import Endpoint, ModelArtefacts, Peer
from servelab.errors import InvalidArgument

__all__ = ["REQUIREMENTS", "MLServerPeer"]

REQUIREMENTS = ("mlserver==1.7.1", "uvloop==0.21.0", "onnxruntime", "numpy")
_RUNTIME = Path(__file__).with_name("_mlserver_runtime.py")


class MLServerPeer(Peer):
    """MLServer with one model; ``parallel_workers`` 0 runs inference in the server process."""

    name = "mlserver"

    def __init__(
        self,
        peers_dir: Path,
        work_dir: Path | None = None,
        progress: Any = None,
        max_batch_size: int = 8,
        max_batch_time_s: float = 0.002,
        parallel_workers: int = 0,
        protocol: str = "http",
    ) -> None:
        super().__init__(work_dir, progress)
        if protocol not in ("http", "grpc"):
            raise InvalidArgument(f"mlserver protocol must be 'http' or 'grpc', got {protocol!r}")
        self.env = PeerEnv(peers_dir, self.name, REQUIREMENTS)
        self.max_batch_size = max_batch_size
        self.max_batch_time_s = max_batch_time_s
        self.parallel_workers = parallel_workers
        self.protocol = protocol

    def install(self) -> None:
        self.env.ensure(self.progress)

    @property
    def models_dir(self) -> Path:
        return self.work_dir / "models"

    def prepare(self, artefacts: ModelArtefacts) -> None:
        if artefacts.onnx is None:
            raise InvalidArgument(f"{self.name} runs ONNX here; model {artefacts.name!r} has no model.onnx")
        self.artefacts = artefacts
        folder = self.models_dir / artefacts.name
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(_RUNTIME, folder / "servelab_ort_runtime.py")
        settings = {
            "name": artefacts.name,
            "implementation": "servelab_ort_runtime.OrtRuntime",
            "max_batch_size": self.max_batch_size if self.max_batch_size > 1 else 0,
            "max_batch_time": self.max_batch_time_s if self.max_batch_size > 1 else 0.0,
            "inputs": [
                {"name": t.name, "datatype": t.datatype, "shape": [-1, *t.dims]} for t in artefacts.inputs
            ],
            "outputs": [
                {"name": t.name, "datatype": t.datatype, "shape": [-1, *t.dims]} for t in artefacts.outputs
            ],
            "parameters": {"uri": str(artefacts.onnx.resolve()), "version": "1"},
        }
        (folder / "model-settings.json").write_text(json.dumps(settings, indent=2))

    def _write_settings(self, ports: list[int]) -> None:
        settings = {
            "debug": False,
            "host": HOST,
            "http_port": ports[0],
            "grpc_port": ports[1],
            "metrics_port": ports[2],
            "parallel_workers": self.parallel_workers,
            "load_models_at_startup": True,
        }
        (self.models_dir / "settings.json").write_text(json.dumps(settings, indent=2))

    def start(self) -> Endpoint:
        assert self.artefacts is not None, "prepare() first"
        ports = free_ports(3)
        self._write_settings(ports)
        tmp = self.work_dir / "tmp"
        tmp.mkdir(exist_ok=True)
        env = {**os.environ, "TMPDIR": str(tmp), "PROMETHEUS_MULTIPROC_DIR": str(tmp),
               "PATH": f"{self.env.root / 'bin'}:{os.environ.get('PATH', '')}"}  # fmt: skip
        env.pop("PYTHONPATH", None)
        proc = self._launch(
            [str(self.env.bin("mlserver")), "start", str(self.models_dir)], cwd=self.models_dir, env=env
        )
        http = f"http://{HOST}:{ports[0]}"
        self._wait_http(f"{http}/v2/models/{self.artefacts.name}/ready", 120.0)
        grpc = f"{HOST}:{ports[1]}"
        url, kind = (grpc, "oip-grpc") if self.protocol == "grpc" else (http, "oip-http")
        return Endpoint(url=url, kind=kind, model=self.artefacts.name, pid=proc.pid, binary=self.protocol == "grpc",
                        extra={"http": http, "grpc": grpc, "metrics": f"http://{HOST}:{ports[2]}"})  # fmt: skip
