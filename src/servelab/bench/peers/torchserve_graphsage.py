"""Real TorchServe 0.12 serving GraphSAGE the TorchServe way: the baseline of the GraphSAGE benchmark.

Same venv, config, ports, quiet logging, token auth off and readiness checks as :class:`TorchServePeer`;
only the ``.mar`` differs: ``_torchserve_graphsage_handler.py`` (Python sampler + numpy gather + torch on
the TorchScript export of ``SageLayers``) and a ``graphsage.json`` naming the graph store folder, which
the handler memory-maps in place. One worker; TorchServe's own batching off by default (every request
already carries a batch of node ids).

    with TorchServeGraphSagePeer(Path(".peers"), graph_dir) as peer:
        peer.install()
        peer.prepare(graphsage_artefacts(model_dir, peer.work_dir / "export"))
        endpoint = peer.start()   # POST {endpoint.url}/predictions/sage {"node_ids": [...]}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servelab.bench.peers.base import ModelArtefacts, TensorInfo
from servelab.bench.peers.torchserve import TorchServePeer
from servelab.errors import InvalidArgument, NotFound

__all__ = ["MODEL_NAME", "TorchServeGraphSagePeer", "graphsage_artefacts"]

MODEL_NAME = "sage"
CONFIG_FILE = "graphsage.json"  # the name the handler reads
_HANDLER = Path(__file__).with_name("_torchserve_graphsage_handler.py")


def graphsage_artefacts(model_dir: Path, out_dir: Path, name: str = MODEL_NAME) -> ModelArtefacts:
    """Export a trained model (``servelab graph train``) to TorchScript under ``out_dir``, describe it."""
    from servelab.graph.export import export_torchscript
    from servelab.graph.model import load_model

    model, _ = load_model(Path(model_dir))
    cfg = model.config
    path = export_torchscript(model, Path(out_dir) / "model.pt")
    return ModelArtefacts(
        name,
        (TensorInfo("node_ids", "INT64", ()),),
        (TensorInfo("logits", "FP32", (cfg.num_classes,)),),
        torchscript=path,
    )


class TorchServeGraphSagePeer(TorchServePeer):
    """TorchServe with the GraphSAGE handler over one graph store; ``torch_threads`` for the layers."""

    def __init__(
        self,
        peers_dir: Path,
        graph_dir: Path,
        fanouts: tuple[int, int] = (10, 10),
        *,
        seed: int = 0,
        torch_threads: int = 1,
        work_dir: Path | None = None,
        progress: Any = None,
        batch_size: int = 1,
        max_batch_delay_ms: int = 1,
    ) -> None:
        super().__init__(peers_dir, work_dir, progress, batch_size, max_batch_delay_ms, workers=1)
        self.graph_dir = Path(graph_dir).resolve()
        if not (self.graph_dir / "manifest.json").is_file():
            raise NotFound(f"no graph store at {self.graph_dir}: manifest.json is missing")
        if len(fanouts) != 2 or min(fanouts) < 1 or torch_threads < 1:
            raise InvalidArgument(f"fanouts must be two positive ints and torch_threads >= 1, got {fanouts}")
        self.fanouts = (int(fanouts[0]), int(fanouts[1]))
        self.seed = seed
        self.torch_threads = torch_threads

    def prepare(self, artefacts: ModelArtefacts) -> None:
        if artefacts.torchscript is None:
            raise InvalidArgument(f"{self.name} serves TorchScript; model {artefacts.name!r} has no model.pt")
        self.artefacts = artefacts
        build = self.work_dir / "build"
        build.mkdir(parents=True, exist_ok=True)
        config = build / CONFIG_FILE
        config.write_text(
            json.dumps(
                {
                    "graph_dir": str(self.graph_dir),
                    "fanouts": list(self.fanouts),
                    "seed": self.seed,
                    "torch_threads": self.torch_threads,
                }
            )
        )
        self._archive(artefacts.name, artefacts.torchscript, _HANDLER, [config])
