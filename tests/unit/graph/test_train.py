"""Training on a small homophilous graph: GraphSAGE must beat the features-only MLP."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from servelab.graph.model import load_model
from servelab.graph.store import build_store
from servelab.graph.train import TrainConfig, train_to_dir

N, F, C = 800, 16, 4


def _block_graph(out: Path, seed: int = 0) -> Path:
    """Stochastic block model: neighbours share the class, features carry a weak class signal."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, C, N)
    by_class = [np.flatnonzero(labels == c) for c in range(C)]
    src = np.repeat(np.arange(N), 6)
    dst = np.array([rng.choice(by_class[labels[v]]) for v in src])
    feats = rng.standard_normal((N, F), dtype=np.float32)
    feats[np.arange(N), labels] += 0.7
    perm = rng.permutation(N)
    splits = {"train": perm[:500], "val": perm[500:600], "test": perm[600:]}
    build_store(out, src, dst, num_nodes=N, features=feats, labels=labels, splits=splits, progress=False)
    return out


def test_sage_beats_mlp_and_saves_the_model(tmp_path: Path) -> None:
    graph = _block_graph(tmp_path / "graph")
    cfg = TrainConfig(hidden=32, fanouts=(5, 5), batch_size=64, steps=60, lr=1e-2, max_seconds=30)
    report = train_to_dir(graph, tmp_path / "model", cfg)
    assert report.sage_steps == 60 and report.eval_nodes == 200
    assert report.sage_accuracy > report.mlp_accuracy + 0.15, report
    assert report.sage_accuracy > 0.8, report
    model, meta = load_model(tmp_path / "model")
    assert model.config.in_features == F and model.config.num_classes == C
    assert (
        json.loads((tmp_path / "model" / "meta.json").read_text())["report"]["sage_accuracy"]
        == meta["report"]["sage_accuracy"]
    )


def test_graph_without_labels_is_refused(tmp_path: Path) -> None:
    build_store(
        tmp_path / "g", [0, 1], [1, 2], num_nodes=3, features=np.ones((3, 2), np.float32), progress=False
    )
    with pytest.raises(ValueError, match="no labels"):
        train_to_dir(tmp_path / "g", tmp_path / "m", TrainConfig(steps=1))


def test_bad_train_config_names_the_fields() -> None:
    with pytest.raises(ValueError, match="batch_size, steps"):
        TrainConfig(steps=0)
