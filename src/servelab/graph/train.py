"""Mini-batch GraphSAGE training on a stored graph, with a features-only MLP as the baseline.

Each step draws seeds from the training split, samples their 2-hop block with the numba sampler,
gathers features and takes one Adam step. Accuracy is measured on (a sample of) the test split for
both models, so the report says how much the graph adds over the node's own features.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from servelab.graph.model import SageConfig, SageLayers, save_model
from servelab.graph.sampler import NumbaSampler, gather_features
from servelab.graph.store import GraphStore

__all__ = ["TrainConfig", "TrainReport", "train", "train_to_dir"]


@dataclass(frozen=True)
class TrainConfig:
    """Training knobs; the defaults finish in a few minutes on 2 cores with a 1M-node graph."""

    hidden: int = 256
    aggregator: str = "mean"
    fanouts: tuple[int, int] = (10, 10)
    batch_size: int = 512
    steps: int = 300
    lr: float = 3e-3
    #: Stop early (both models) after this many seconds of training each.
    max_seconds: float = 240.0
    #: Test nodes scored (a random sample of the test split when it is larger).
    eval_nodes: int = 10_000
    seed: int = 0

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.steps < 1 or self.eval_nodes < 1:
            raise ValueError(f"batch_size, steps and eval_nodes must be >= 1, got {self}")
        if not self.lr > 0 or not self.max_seconds > 0:
            raise ValueError(
                f"lr and max_seconds must be > 0, got lr={self.lr}, max_seconds={self.max_seconds}"
            )


@dataclass
class TrainReport:
    """What training achieved; saved into meta.json."""

    sage_accuracy: float
    mlp_accuracy: float
    sage_steps: int
    mlp_steps: int
    sage_seconds: float
    mlp_seconds: float
    final_loss: float
    eval_nodes: int
    config: dict[str, object] = field(default_factory=dict)


#: seeds -> (x, nbr1, nbr2) as torch tensors
BlockFn = Callable[[np.ndarray], tuple[Tensor, Tensor, Tensor]]


def _splits(store: GraphStore, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    labels = store.labels
    if labels is None:
        raise ValueError(f"graph {store.path} has no labels: training needs a store built with labels")
    train_idx, test_idx = store.train_idx, store.test_idx
    if train_idx is None or test_idx is None or len(train_idx) == 0 or len(test_idx) == 0:
        perm = rng.permutation(len(labels))
        cut = int(0.8 * len(perm))
        train_idx, test_idx = perm[:cut], perm[cut:]
    return np.asarray(labels, np.int64), np.asarray(train_idx, np.int64), np.asarray(test_idx, np.int64)


def _block_fn(store: GraphStore, fanouts: tuple[int, int], seed: int) -> BlockFn:
    sampler = NumbaSampler(store, fanouts=fanouts, seed=seed)

    def block(seeds: np.ndarray) -> tuple[Tensor, Tensor, Tensor]:
        blocks = sampler.sample(seeds)
        x = gather_features(store, blocks.nodes)
        return torch.from_numpy(x), torch.from_numpy(blocks.nbr1), torch.from_numpy(blocks.nbr2)

    return block


def _fit(
    forward: Callable[[np.ndarray], Tensor],
    params: list[nn.Parameter],
    labels: np.ndarray,
    train_idx: np.ndarray,
    cfg: TrainConfig,
    rng: np.random.Generator,
) -> tuple[int, float, float]:
    """Adam on cross-entropy; returns (steps taken, seconds, last loss)."""
    opt = torch.optim.Adam(params, lr=cfg.lr)
    start, loss_value, steps = time.perf_counter(), float("nan"), 0
    while steps < cfg.steps:
        steps += 1
        seeds = rng.choice(train_idx, size=min(cfg.batch_size, len(train_idx)), replace=False)
        loss = nn.functional.cross_entropy(forward(seeds), torch.from_numpy(labels[seeds]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss_value = float(loss.detach())
        if time.perf_counter() - start > cfg.max_seconds:
            break
    return steps, time.perf_counter() - start, loss_value


def _accuracy(forward: Callable[[np.ndarray], Tensor], labels: np.ndarray, nodes: np.ndarray) -> float:
    correct = 0
    with torch.no_grad():
        for chunk in np.array_split(nodes, max(1, len(nodes) // 1024)):
            correct += int((forward(chunk).argmax(dim=1).numpy() == labels[chunk]).sum())
    return correct / len(nodes)


def train(store: GraphStore, cfg: TrainConfig = TrainConfig()) -> tuple[SageLayers, TrainReport]:
    """Train GraphSAGE and the MLP baseline on ``store`` (a GraphStore); returns the model and report."""
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    labels, train_idx, test_idx = _splits(store, rng)
    num_features = store.num_features
    num_classes = int(store.num_classes or labels.max() + 1)
    model = SageLayers(SageConfig(num_features, num_classes, cfg.hidden, cfg.aggregator, cfg.fanouts))
    block = _block_fn(store, cfg.fanouts, cfg.seed)

    def sage(seeds: np.ndarray) -> Tensor:
        return model(*block(seeds))[0]

    mlp = nn.Sequential(nn.Linear(num_features, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, num_classes))

    def mlp_forward(seeds: np.ndarray) -> Tensor:
        return mlp(torch.from_numpy(gather_features(store, seeds)))

    sage_steps, sage_s, loss = _fit(sage, list(model.parameters()), labels, train_idx, cfg, rng)
    mlp_steps, mlp_s, _ = _fit(mlp_forward, list(mlp.parameters()), labels, train_idx, cfg, rng)
    model.eval()
    eval_idx = (
        test_idx if len(test_idx) <= cfg.eval_nodes else rng.choice(test_idx, cfg.eval_nodes, replace=False)
    )
    report = TrainReport(
        sage_accuracy=_accuracy(sage, labels, eval_idx),
        mlp_accuracy=_accuracy(mlp_forward, labels, eval_idx),
        sage_steps=sage_steps,
        mlp_steps=mlp_steps,
        sage_seconds=sage_s,
        mlp_seconds=mlp_s,
        final_loss=loss,
        eval_nodes=len(eval_idx),
        config=asdict(cfg),
    )
    return model, report


def train_to_dir(graph_dir: Path, model_dir: Path, cfg: TrainConfig = TrainConfig()) -> TrainReport:
    """Open the graph at ``graph_dir``, train, and save the model and report into ``model_dir``."""
    store = GraphStore.open(Path(graph_dir))
    model, report = train(store, cfg)
    save_model(
        model, Path(model_dir), extra={"report": asdict(report), "graph_dir": str(Path(graph_dir).resolve())}
    )
    return report
