"""A TorchServe model store built at test time with ``torch-model-archiver``, and a servelab serving it.

:func:`build_store` writes three archives, each a kind of model TorchServe users bring:

- ``eager.mar``: an eager model (``model.py`` + state dict) with a custom ``BaseHandler`` subclass
  that reads an extra file and its ``model-config.yaml`` section in ``initialize``, and sets a
  content type and a header on its answers;
- ``batcher.mar``: ``batchSize`` 4 in ``model-config.yaml``; each answer says how many requests its
  batch held (TorchServe and servelab both fill a batch of four at once);
- ``streamer.mar``: a function handler (``streamer:handle``) that streams two intermediate parts
  with ``send_intermediate_predict_response`` before its answer.

:func:`build_envelope_store` writes ``scripted.mar``: a TorchScript model (``harness.models.linear_torchscript``)
with TorchServe's built-in base handler, served with ``service_envelope=json`` in config.properties
(``{"instances": [...]}`` in, ``{"predictions": [...]}`` out; TorchServe's envelope is one for the
whole server, hence a store of its own). TorchServe's vision handlers need torchvision, whose PyPI
build for torch 2.13 is a CUDA one that does not load beside the CPU torch of these machines.

:class:`TorchServeStoreServer` is ``servelab serve --model-store STORE --models all`` on port 0
everywhere, TorchServe's two gRPC ports included (read from the server's ``SERVELAB_PORTS`` line).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.models import linear_torchscript
from harness.servers import PORTS_LINE, ServerProcess

__all__ = [
    "ARCHIVES", "SCRIPTED_WEIGHTS", "TorchServeStoreServer", "archiver", "build_envelope_store", "build_store",
    "envelope_config", "ts_missing",
]  # fmt: skip

ARCHIVES = ("batcher", "eager", "streamer")
SCRIPTED_WEIGHTS = np.array([[1.0, 0.5, -1.0], [0.0, 2.0, 1.0], [-0.5, 0.25, 0.0], [3.0, -1.0, 0.5]], np.float32)

MODEL_PY = """\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x)
"""

#: a custom BaseHandler: initialize reads an extra file and the model-config.yaml handler section
EAGER_HANDLER = """\
import json
import os

import torch
from ts.torch_handler.base_handler import BaseHandler


class ScaledHandler(BaseHandler):
    def initialize(self, context):
        super().initialize(context)
        model_dir = context.system_properties.get("model_dir")
        with open(os.path.join(model_dir, "scale.json")) as f:
            self.scale = json.load(f)["scale"]
        self.tag = context.model_yaml_config.get("handler", {}).get("tag", "none")

    def preprocess(self, data):
        rows = []
        for row in data:
            value = row.get("data") or row.get("body")
            if isinstance(value, (bytes, bytearray)):
                value = json.loads(value)
            if not isinstance(value, list) or len(value) != 4:
                raise ValueError("expected 4 numbers")
            rows.append(value)
        return torch.tensor(rows, dtype=torch.float32)

    def postprocess(self, data):
        for i in range(data.shape[0]):
            self.context.set_response_content_type(i, "application/json")
            self.context.set_response_header(i, "x-handler-tag", self.tag)
        return [{"scaled": (row * self.scale).tolist(), "tag": self.tag} for row in data]
"""

BATCH_HANDLER = """\
import json

from ts.torch_handler.base_handler import BaseHandler


class BatchHandler(BaseHandler):
    def initialize(self, context):
        self.context = context
        self.initialized = True

    def handle(self, data, context):
        size = len(data)
        answers = []
        for row in data:
            value = row.get("data") or row.get("body")
            if isinstance(value, (bytes, bytearray)):
                value = json.loads(value)
            answers.append({"batch": size, "max_batch": context.system_properties["batch_size"], "echo": value})
        return answers
"""

STREAM_HANDLER = """\
from ts.handler_utils.utils import send_intermediate_predict_response


def handle(data, context):
    if data is None:
        return None
    for part in ("one ", "two "):
        send_intermediate_predict_response([part] * len(data), context.request_ids, "Intermediate Prediction success", 200, context)
    return ["three"] * len(data)
"""


def ts_missing() -> str | None:
    """Why servelab cannot run TorchServe handlers here (None when it can)."""
    if importlib.util.find_spec("ts") is None:
        return "TorchServe's handler library is not installed: pip install 'servelab[torchserve]'"
    if archiver() is None:
        return "torch-model-archiver is not installed: pip install 'servelab[torchserve]'"
    return None


def archiver() -> Path | None:
    """torch-model-archiver beside this interpreter, else on PATH."""
    beside = Path(sys.executable).parent / "torch-model-archiver"
    found = beside if beside.exists() else shutil.which("torch-model-archiver")
    return Path(found) if found else None


def _archive(store: Path, name: str, work: Path, handler: str, serialized: Path | None = None,
             model_file: Path | None = None, extra: list[Path] | None = None, config: Path | None = None) -> Path:
    tool = archiver()
    assert tool is not None, ts_missing()
    argv = [str(tool), "--model-name", name, "--version", "1.0", "--handler", handler, "--export-path", str(store), "--force"]
    for flag, value in (("--serialized-file", serialized), ("--model-file", model_file), ("--config-file", config)):
        if value is not None:
            argv += [flag, str(value)]
    if extra:
        argv += ["--extra-files", ",".join(str(p) for p in extra)]
    subprocess.run(argv, check=True, capture_output=True, cwd=work, timeout=300)
    return store / f"{name}.mar"


def _eager_state(work: Path) -> Path:
    import torch

    (work / "model.py").write_text(MODEL_PY)
    spec = importlib.util.spec_from_file_location("ts_test_model", work / "model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(1)
    torch.save(module.Net().state_dict(), work / "net.pt")
    return work / "net.pt"


def build_store(folder: Path) -> Path:
    """``folder/store`` with the three archives (see the module docstring)."""
    store, work = folder / "store", folder / "work"
    store.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    for name, source in (("eager_handler.py", EAGER_HANDLER), ("batch_handler.py", BATCH_HANDLER),
                         ("streamer.py", STREAM_HANDLER)):  # fmt: skip
        (work / name).write_text(source)
    (work / "scale.json").write_text(json.dumps({"scale": 2.0}))
    (work / "eager.yaml").write_text("minWorkers: 1\nmaxWorkers: 1\nhandler:\n  tag: from-yaml\n")
    _archive(store, "eager", work, "eager_handler.py", _eager_state(work), work / "model.py", [work / "scale.json"],
             work / "eager.yaml")  # fmt: skip
    (work / "batcher.yaml").write_text(textwrap.dedent("""\
        minWorkers: 1
        maxWorkers: 1
        batchSize: 4
        maxBatchDelay: 20000
    """))
    _archive(store, "batcher", work, "batch_handler.py", config=work / "batcher.yaml")
    (work / "streamer.yaml").write_text("minWorkers: 1\nmaxWorkers: 1\n")
    _archive(store, "streamer", work, "streamer:handle", config=work / "streamer.yaml")
    return store


def build_envelope_store(folder: Path) -> Path:
    """``folder/envelope-store`` with ``scripted.mar`` (see the module docstring)."""
    store, work = folder / "envelope-store", folder / "envelope-work"
    store.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    linear_torchscript(work / "linear.pt", SCRIPTED_WEIGHTS)
    _archive(store, "scripted", work, "base_handler", work / "linear.pt")
    return store


def envelope_config(path: Path, store: Path) -> Path:
    """A config.properties serving ``store`` with the json envelope (no token auth, model API on)."""
    path.write_text(f"model_store={store}\nload_models=all\nservice_envelope=json\n"
                    "disable_token_authorization=true\nenable_model_api=true\ndefault_workers_per_model=1\n")
    return path


@dataclass
class TorchServeStoreServer(ServerProcess):
    """``servelab serve --model-store STORE --models all`` (``repository`` is the store folder), or with
    ``config`` set ``servelab serve --torchserve-config CONFIG`` (its store and keys)."""

    config: Path | None = None
    grpc_inference_port: int = 0
    grpc_management_port: int = 0

    def target_args(self) -> list[str]:
        ports = ["--grpc-inference-port", "0", "--grpc-management-port", "0"]
        if self.config is not None:
            return ["--torchserve-config", str(self.config), *ports]
        return ["--model-store", str(self.repository), "--models", "all", "--disable-token-auth", "--enable-model-api",
                *ports]  # fmt: skip

    def start(self, timeout_s: float = 300.0) -> TorchServeStoreServer:
        super().start(timeout_s)
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith(PORTS_LINE):
                ports = json.loads(line[len(PORTS_LINE):])
                self.grpc_inference_port = ports["torchserve_grpc_inference"]
                self.grpc_management_port = ports["torchserve_grpc_management"]
        return self
