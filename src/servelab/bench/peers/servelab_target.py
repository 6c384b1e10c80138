"""servelab itself as a measured target: ``servelab serve REPO`` in a process group of its own, with one
model loaded explicitly, every port free and on 127.0.0.1.

The bench side never imports the server: this starts ``python -m servelab.cli serve`` and talks to it
over OIP REST (binary tensor extension) or gRPC, exactly as it would to any other server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servelab.bench.peers.base import Endpoint, ModelArtefacts, Peer
from servelab.bench.serverproc import ServePorts, serve_argv
from servelab.errors import InvalidArgument

__all__ = ["ServelabPeer"]


class ServelabPeer(Peer):
    """``servelab serve`` for ``model`` (a model name in ``repository``)."""

    name = "servelab"

    def __init__(
        self,
        repository: Path,
        model: str,
        work_dir: Path | None = None,
        progress: Any = None,
        protocol: str = "http",
        extra_args: tuple[str, ...] = (),
    ) -> None:
        super().__init__(work_dir, progress)
        if protocol not in ("http", "grpc"):
            raise InvalidArgument(f"servelab protocol must be 'http' or 'grpc', got {protocol!r}")
        self.repository = repository
        self.model = model
        self.protocol = protocol
        self.extra_args = extra_args

    def prepare(self, artefacts: ModelArtefacts | None = None) -> None:
        """Nothing to convert: servelab serves the repository as it is; only check the model's folder."""
        if not (self.repository / self.model).is_dir():
            raise InvalidArgument(f"model {self.model!r} is not a folder of repository {self.repository}")
        self.artefacts = artefacts

    def start(self) -> Endpoint:
        ports = ServePorts.free()
        flags = ("--model-control-mode", "explicit", "--load-model", self.model, "--log-level", "warning")
        proc = self._launch(serve_argv(self.repository, ports, *flags, *self.extra_args))
        base, grpc_url = ports.http_url, ports.grpc_address
        self._wait_http(f"{base}/v2/health/ready", 120.0)
        self._wait_http(f"{base}/v2/models/{self.model}/ready", 120.0)
        url, kind = (grpc_url, "oip-grpc") if self.protocol == "grpc" else (base, "oip-http")
        return Endpoint(url=url, kind=kind, model=self.model, pid=proc.pid, binary=True,
                        extra={"http": base, "grpc": grpc_url, "metrics": ports.metrics_url})  # fmt: skip
