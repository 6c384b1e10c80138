"""The real Triton 2.51 serving GraphSAGE the published hybrid's way: a python-backend model ``sage``.

The seed design puts neighbour sampling in a Triton custom/python backend and the layers on ONNX Runtime;
this peer builds that for real from a repository written by ``servelab graph export``, so that it serves
the same graph and the same model as servelab's ``sage_fused`` in it:

* ``model.py``: ``_triton_graphsage_model.py`` (sample -> gather -> layers, one request at a time per
  instance);
* ``_sampler_kernels.py``: servelab's numba kernels, copied byte for byte from ``servelab.graph``. The stub
  runs Triton's embedded Python in isolated mode, where servelab is not installed; putting servelab's
  source folder on its ``sys.path`` instead would import ``servelab/__init__`` and ``servelab.graph``'s
  package, whose other modules need pydantic and more, so the one module the sampler needs (numpy and
  numba only) travels with the model, and the tests check the copy is the file servelab runs;
* ``model.onnx``: the ``graphsage_layers`` ONNX graph of the export (the ``sage`` ensemble's layers), on
  onnxruntime with ``layers_threads`` intra-op threads (1 by default, as ``sage_fused``);
* the graph store: the one ``sage_fused``'s ``graph_dir`` names, memory-mapped in place (absolute path).

numba and llvmlite are added to Triton's python backend folder on first use
(:meth:`TritonInstall.ensure_packages`, ``MODEL_PACKAGES["graphsage"]``). Inputs and outputs are those of
``sage_fused`` for stored nodes (``node_ids`` INT64 [-1] -> ``logits``, ``embeddings`` FP32), so one OIP
client (gRPC or REST binary) serves both; the inductive inputs are not offered.

    with TritonGraphSagePeer(Path(".peers"), exported_repo, protocol="grpc") as peer:
        peer.install()
        peer.prepare_graphsage()
        endpoint = peer.start()   # ModelInfer("sage", node_ids) at endpoint.url
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from servelab.bench.peers.triton import TritonPeer
from servelab.errors import InvalidArgument, NotFound
from servelab.graph import _sampler_kernels
from servelab.graph.configs import FUSED_MODEL, LAYERS_MODEL
from servelab.graph.parameters import FusedSageParameters
from servelab.protocol import model_config_pb2 as mc
from servelab.trust import resolve_inside

__all__ = ["KERNELS_FILE", "MODEL_NAME", "SERVED_AS", "TritonGraphSagePeer", "sage_config", "write_sage_model"]

MODEL_NAME = "sage"
KERNELS_FILE = Path(_sampler_kernels.__file__)
SERVED_AS = "python backend: servelab's numba sampler kernels + graphsage_layers ONNX on onnxruntime"
_MODEL_PY = Path(__file__).with_name("_triton_graphsage_model.py")


def _read_config(path: Path) -> mc.ModelConfig:
    if not path.is_file():
        raise NotFound(f"{path} is missing: expected a repository written by `servelab graph export`")
    return text_format.Parse(path.read_text(), mc.ModelConfig())


def sage_config(fused: mc.ModelConfig, graph_dir: Path, instances: int = 1, layers_threads: int = 1,
                name: str = MODEL_NAME) -> mc.ModelConfig:  # fmt: skip
    """The python model's config.pbtxt: ``sage_fused``'s node_ids and outputs, its sampler settings."""
    params = FusedSageParameters.read(fused)
    cfg = mc.ModelConfig(name=name, backend="python", max_batch_size=0)
    cfg.input.add(name="node_ids", data_type=mc.TYPE_INT64, dims=[-1])
    cfg.output.extend(o for o in fused.output if o.name in ("logits", "embeddings"))
    cfg.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=instances)
    values = {
        "graph_dir": str(graph_dir), "fanouts": ",".join(str(f) for f in params.fanouts), "seed": str(params.seed),
        "layers_threads": str(layers_threads), "parallel_from": str(params.parallel_from),
    }  # fmt: skip
    for key, value in values.items():
        cfg.parameters[key].string_value = value
    return cfg


def write_sage_model(repository: Path, folder: Path, instances: int = 1, layers_threads: int = 1) -> Path:
    """Lay out the Triton python model for the export in ``repository`` at ``folder``; returns ``folder``."""
    repository = Path(repository).resolve()
    if instances < 1 or layers_threads < 1:
        raise InvalidArgument(f"instances and layers_threads must be >= 1, got {instances} and {layers_threads}")
    fused = _read_config(repository / FUSED_MODEL / "config.pbtxt")
    params = FusedSageParameters.read(fused)
    if not params.graph_dir:
        raise InvalidArgument(f"{repository / FUSED_MODEL}/config.pbtxt names no graph_dir")
    graph_dir = resolve_inside(repository, params.graph_dir, "parameter graph_dir", within="the model repository")
    if not (graph_dir / "manifest.json").is_file():
        raise NotFound(f"no graph store at {graph_dir}: manifest.json is missing")
    layers = repository / LAYERS_MODEL / "1" / "model.onnx"
    if not layers.is_file():
        raise NotFound(f"{layers} is missing: export the repository with --runtime onnxruntime")
    version = Path(folder) / "1"
    version.mkdir(parents=True, exist_ok=True)
    shutil.copy(_MODEL_PY, version / "model.py")
    shutil.copy(KERNELS_FILE, version / KERNELS_FILE.name)
    shutil.copy(layers, version / "model.onnx")
    cfg = sage_config(fused, graph_dir, instances, layers_threads, name=Path(folder).name)
    (Path(folder) / "config.pbtxt").write_text(text_format.MessageToString(cfg))
    return Path(folder)


class TritonGraphSagePeer(TritonPeer):
    """``tritonserver`` with the GraphSAGE python model over an exported repository's graph and layers."""

    def __init__(
        self,
        peers_dir: Path,
        repository: Path,
        *,
        protocol: str = "grpc",
        instances: int = 1,
        layers_threads: int = 1,
        work_dir: Path | None = None,
        progress: Any = None,
    ) -> None:
        super().__init__(peers_dir, work_dir, progress, protocol=protocol, instances=instances)
        self.export = Path(repository)
        self.layers_threads = layers_threads

    def install(self) -> None:
        """Triton, plus numba in its python backend folder (once)."""
        self.triton.ensure_packages("graphsage", self.progress)

    def prepare_graphsage(self, name: str = MODEL_NAME) -> None:
        """Write the ``sage`` python model into Triton's repository and serve it."""
        write_sage_model(self.export, self.repository / name, self.instances, self.layers_threads)
        self._served(name, SERVED_AS)
