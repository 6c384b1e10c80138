"""GraphSAGE layers on padded, sampled neighbourhoods (2 layers, mean or pooling aggregator).

Neighbour lists arrive as fixed-width index matrices padded with one index past the end of the
source rows. Each layer appends one zero row to its source, gathers, reduces along the neighbour axis
and (for the mean) divides by the count of real neighbours clamped at 1: no Python loops, so the
module exports to ONNX / TorchScript with dynamic row counts. Parameter names follow
torch_geometric's ``SAGEConv`` (``lin_l``, ``lin_r``, ``lin``) so weights copy across.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

__all__ = ["AGGREGATORS", "SageConfig", "SageLayer", "SageLayers", "load_model", "save_model"]

AGGREGATORS = ("mean", "pool")
META_FILE = "meta.json"
WEIGHTS_FILE = "model.pt"


@dataclass(frozen=True)
class SageConfig:
    """Shape of the model; stored next to the weights as JSON."""

    in_features: int
    num_classes: int
    hidden: int = 256
    aggregator: str = "mean"
    fanouts: tuple[int, int] = (10, 10)

    def __post_init__(self) -> None:
        if self.aggregator not in AGGREGATORS:
            raise ValueError(f"aggregator must be one of {AGGREGATORS}, got {self.aggregator!r}")
        if min(self.in_features, self.num_classes, self.hidden) < 1:
            raise ValueError(f"in_features, num_classes and hidden must be >= 1, got {self}")
        if len(self.fanouts) != 2 or min(self.fanouts) < 1:
            raise ValueError(f"fanouts must be two positive ints, got {self.fanouts}")


class SageLayer(nn.Module):
    """One SAGE layer: ``lin_l(aggregate(neighbours)) + lin_r(self)``."""

    def __init__(self, in_features: int, out_features: int, aggregator: str = "mean") -> None:
        super().__init__()
        if aggregator not in AGGREGATORS:
            raise ValueError(f"aggregator must be one of {AGGREGATORS}, got {aggregator!r}")
        self.pool = aggregator == "pool"
        # Always created so that TorchScript sees one attribute type; unused by the mean.
        self.lin = nn.Linear(in_features, in_features) if self.pool else nn.Identity()
        self.lin_l = nn.Linear(in_features, out_features)
        self.lin_r = nn.Linear(in_features, out_features, bias=False)

    def forward(self, src: Tensor, nbr: Tensor) -> Tensor:
        """``src`` [S, F] source rows; ``nbr`` [T, k] indices into src padded with S -> [T, out]."""
        dst = src[: nbr.shape[0]]
        if self.pool:
            src = torch.relu(self.lin(src))
        padded = torch.cat([src, src.new_zeros((1, src.shape[1]))], dim=0)
        gathered = padded[nbr]  # [T, k, F]
        if self.pool:
            # Projected rows are >= 0, so the zero pad row never wins a max and a node without
            # neighbours aggregates to 0, as torch_geometric's scatter-max does.
            agg = gathered.amax(dim=1)
        else:
            count = (nbr < src.shape[0]).sum(dim=1, keepdim=True).clamp(min=1)
            agg = gathered.sum(dim=1) / count.to(src.dtype)
        return self.lin_l(agg) + self.lin_r(dst)


class SageLayers(nn.Module):
    """Two SAGE layers and a linear head over one sampled 2-hop block.

    forward(x [n_all, F], nbr1 [n1, f1], nbr2 [B, f2]) -> (logits [B, C], embeddings [B, hidden]).
    Rows 0..B-1 of ``x`` are the seeds, rows 0..n1-1 the seeds and their first-hop nodes.
    """

    def __init__(self, config: SageConfig) -> None:
        super().__init__()
        self.config = config
        self.conv1 = SageLayer(config.in_features, config.hidden, config.aggregator)
        self.conv2 = SageLayer(config.hidden, config.hidden, config.aggregator)
        self.head = nn.Linear(config.hidden, config.num_classes)

    def forward(self, x: Tensor, nbr1: Tensor, nbr2: Tensor) -> tuple[Tensor, Tensor]:
        h1 = torch.relu(self.conv1(x, nbr1))
        emb = self.conv2(h1, nbr2)
        return self.head(torch.relu(emb)), emb


def save_model(model: SageLayers, model_dir: Path, extra: dict[str, object] | None = None) -> Path:
    """Write ``model.pt`` (state_dict) and ``meta.json`` (config + ``extra``) into ``model_dir``."""
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), model_dir / WEIGHTS_FILE)
    meta = {"config": asdict(model.config), **(extra or {})}
    (model_dir / META_FILE).write_text(json.dumps(meta, indent=2))
    return model_dir


def load_model(model_dir: Path) -> tuple[SageLayers, dict[str, object]]:
    """Read a model written by :func:`save_model`; returns it in eval mode and its metadata."""
    model_dir = Path(model_dir)
    meta_path, weights = model_dir / META_FILE, model_dir / WEIGHTS_FILE
    if not meta_path.is_file() or not weights.is_file():
        raise FileNotFoundError(
            f"{model_dir} is not a GraphSAGE model directory: expected {META_FILE} and {WEIGHTS_FILE} "
            "(written by `servelab graph train`)"
        )
    meta = json.loads(meta_path.read_text())
    raw = dict(meta["config"])
    raw["fanouts"] = tuple(raw["fanouts"])
    model = SageLayers(SageConfig(**raw))
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    return model.eval(), meta
