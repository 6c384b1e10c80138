"""NVIDIA Triton Inference Server 2.51 as a peer: the real ``tritonserver`` with its python backend.

Installed on first use under ``<peers_dir>/triton`` (see ``_triton_install``). It serves python-backend
models as they are (the same ``model.py`` and ``config.pbtxt`` servelab serves); an ONNX model is served
through a generated python model that runs it with onnxruntime (``_triton_onnx_model.py``), since this
build of Triton has no ONNX Runtime backend, and ``served_as`` says so wherever the peer is reported.

The server listens on free ports of 127.0.0.1 only, loads the named models explicitly
(``--model-control-mode explicit``), and is ready when ``/v2/health/ready`` and every model's ready
endpoint answer 200. ``stop()`` ends its process group (the python stubs are in it), by PID.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from servelab.bench.net import HOST, free_ports
from servelab.bench.peers._triton_install import TRITON_VERSION, TritonInstall
from servelab.bench.peers.base import Endpoint, ModelArtefacts, Peer, TensorInfo
from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2

__all__ = ["ONNX_RUNNER", "PYTHON_AS_IS", "TritonPeer", "onnx_runner_config", "write_onnx_runner"]

_ONNX_MODEL_PY = Path(__file__).with_name("_triton_onnx_model.py")
PYTHON_AS_IS = "python backend: the model's own model.py"
ONNX_RUNNER = "python backend: generated model.py running model.onnx on onnxruntime"
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


def _data_type(info: TensorInfo) -> int:
    name = "TYPE_STRING" if info.datatype == "BYTES" else f"TYPE_{info.datatype}"
    try:
        return int(model_config_pb2.DataType.Value(name))
    except ValueError:
        raise InvalidArgument(f"tensor {info.name!r}: datatype {info.datatype!r} has no Triton TYPE_") from None


def onnx_runner_config(
    artefacts: ModelArtefacts, instances: int = 1, max_queue_delay_us: int | None = None, intra_op_threads: int = 1
) -> str:
    """config.pbtxt (text format of Triton's ModelConfig) for the generated onnxruntime python model."""
    cfg = model_config_pb2.ModelConfig(
        name=artefacts.name, backend="python", max_batch_size=max(artefacts.max_batch_size, 0)
    )
    for infos, field in ((artefacts.inputs, cfg.input), (artefacts.outputs, cfg.output)):
        for t in infos:
            field.add(name=t.name, data_type=_data_type(t), dims=list(t.dims))  # type: ignore[attr-defined]
    cfg.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_CPU, count=instances)
    cfg.parameters["intra_op_threads"].string_value = str(intra_op_threads)
    if max_queue_delay_us is not None and artefacts.max_batch_size > 0:
        cfg.dynamic_batching.max_queue_delay_microseconds = max_queue_delay_us
    return text_format.MessageToString(cfg)


def write_onnx_runner(
    folder: Path, artefacts: ModelArtefacts, instances: int = 1, max_queue_delay_us: int | None = None,
    intra_op_threads: int = 1,
) -> None:
    """A python-backend model folder that runs ``artefacts.onnx`` with onnxruntime (on Triton or servelab)."""
    if artefacts.onnx is None:
        raise InvalidArgument(f"model {artefacts.name!r} has no model.onnx to wrap in a python model")
    (folder / "1").mkdir(parents=True, exist_ok=True)
    shutil.copy(_ONNX_MODEL_PY, folder / "1" / "model.py")
    shutil.copy(artefacts.onnx, folder / "1" / "model.onnx")
    config = onnx_runner_config(artefacts, instances, max_queue_delay_us, intra_op_threads)
    (folder / "config.pbtxt").write_text(config)


class TritonPeer(Peer):
    """``tritonserver`` for one model (``prepare``) or several python models of a repository."""

    name = "triton"

    def __init__(
        self,
        peers_dir: Path,
        work_dir: Path | None = None,
        progress: Any = None,
        protocol: str = "http",
        instances: int = 1,
        max_queue_delay_us: int | None = None,
        intra_op_threads: int = 1,
    ) -> None:
        super().__init__(work_dir, progress)
        if protocol not in ("http", "grpc"):
            raise InvalidArgument(f"triton protocol must be 'http' or 'grpc', got {protocol!r}")
        if instances < 1:
            raise InvalidArgument(f"triton instances must be >= 1, got {instances}")
        self.triton = TritonInstall(peers_dir)
        self.protocol = protocol
        self.instances = instances
        self.max_queue_delay_us = max_queue_delay_us
        self.intra_op_threads = intra_op_threads
        self.models: list[str] = []
        self.served_as: dict[str, str] = {}

    @property
    def repository(self) -> Path:
        return self.work_dir / "models"

    def install(self) -> None:
        self.triton.ensure(self.progress)

    def prepare(self, artefacts: ModelArtefacts) -> None:
        """Lay out one model: its python folder as it is, else a python model around its ONNX file."""
        if artefacts.python_model is not None:
            self.add_python_model(artefacts.python_model)
        elif artefacts.onnx is not None:
            write_onnx_runner(
                self.repository / artefacts.name, artefacts, self.instances, self.max_queue_delay_us,
                self.intra_op_threads,
            )  # fmt: skip
            self._served(artefacts.name, ONNX_RUNNER)
        else:
            raise InvalidArgument(
                f"triton here runs python-backend models; {artefacts.name!r} has neither a model.py nor a model.onnx"
            )
        self.artefacts = artefacts

    def add_python_model(self, folder: Path, name: str | None = None) -> None:
        """Serve a python-backend model folder (config.pbtxt + <version>/model.py) unchanged."""
        name = name or folder.name
        cfg = folder / "config.pbtxt"
        if not cfg.is_file():
            raise InvalidArgument(f"{folder} has no config.pbtxt; expected a python-backend model folder")
        parsed = text_format.Parse(cfg.read_text(), model_config_pb2.ModelConfig())
        if parsed.backend != "python":
            raise InvalidArgument(f"{cfg}: backend is {parsed.backend or parsed.platform!r}; triton here runs 'python'")
        if parsed.name and parsed.name != name:
            raise InvalidArgument(f"{cfg}: name {parsed.name!r} differs from the folder name {name!r}")
        shutil.copytree(folder, self.repository / name, ignore=_IGNORE, dirs_exist_ok=True)
        self._served(name, PYTHON_AS_IS)

    def _served(self, name: str, how: str) -> None:
        if name not in self.models:
            self.models.append(name)
        self.served_as[name] = how

    def argv(self, ports: Sequence[int]) -> list[str]:
        """The ``tritonserver`` command line for HTTP, gRPC and metrics ports on 127.0.0.1."""
        loads = [arg for m in self.models for arg in ("--load-model", m)]
        return [
            str(self.triton.server), "--model-repository", str(self.repository),
            "--backend-directory", str(self.triton.backends), "--model-control-mode", "explicit", *loads,
            "--http-address", HOST, "--http-port", str(ports[0]), "--grpc-address", HOST,
            "--grpc-port", str(ports[1]), "--metrics-address", HOST, "--metrics-port", str(ports[2]),
            "--exit-timeout-secs", "5", "--pinned-memory-pool-byte-size", "0", "--log-verbose", "0",
        ]  # fmt: skip

    def start(self) -> Endpoint:
        if not self.models:
            raise InvalidArgument("prepare() or add_python_model() first: triton has no model to serve")
        ports = free_ports(3)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        proc = self._launch(self.argv(ports), cwd=self.work_dir, env=env)
        http = f"http://{HOST}:{ports[0]}"
        self._wait_http(f"{http}/v2/health/ready", 180.0)
        for model in self.models:
            self._wait_http(f"{http}/v2/models/{model}/ready", 180.0)
        grpc = f"{HOST}:{ports[1]}"
        url, kind = (grpc, "oip-grpc") if self.protocol == "grpc" else (http, "oip-http")
        first = self.models[0]
        extra = {"http": http, "grpc": grpc, "metrics": f"http://{HOST}:{ports[2]}",
                 "version": TRITON_VERSION, "served_as": self.served_as[first]}  # fmt: skip
        return Endpoint(url=url, kind=kind, model=first, pid=proc.pid, binary=True, extra=extra)
