"""Parity of exported GraphSAGE artefacts with eager torch, checked before an export is published.

:func:`check_parity` compares a layers artefact (any runtime of :mod:`servelab.graph.sessions`) and
:func:`check_dense_parity` the fused model's dense graph (:mod:`servelab.graph.dense`) with the
trained :class:`~servelab.graph.model.SageLayers` on random padded blocks from :func:`example_block`.
Export-time only: this module imports torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from servelab.graph._fused_kernels import dense_inputs
from servelab.graph.dense import DENSE_INPUTS
from servelab.graph.model import SageLayers
from servelab.graph.sessions import OUTPUT_NAMES, LayersFn, eager_runner, ort_session

__all__ = ["ParityError", "check_dense_parity", "check_parity", "example_block"]

Block = tuple[np.ndarray, np.ndarray, np.ndarray]


class ParityError(AssertionError):
    """An exported artefact disagrees with eager torch beyond the tolerance."""


def example_block(
    in_features: int, fanouts: tuple[int, int], batch: int = 4, hop1: int = 7, hop2: int = 9, seed: int = 0
) -> Block:
    """A random padded block (x, nbr1, nbr2) with some padding and some degree-0 rows."""
    rng = np.random.default_rng(seed)
    n1, n_all = batch + hop1, batch + hop1 + hop2
    x = rng.standard_normal((n_all, in_features), dtype=np.float32)
    nbr1 = rng.integers(0, n_all, size=(n1, fanouts[1]), dtype=np.int64)
    nbr2 = rng.integers(0, n1, size=(batch, fanouts[0]), dtype=np.int64)
    nbr1[rng.random(nbr1.shape) < 0.3] = n_all  # padding
    nbr2[rng.random(nbr2.shape) < 0.3] = n1
    nbr1[-1] = n_all  # a node without neighbours
    nbr2[-1] = n1
    return x, nbr1, nbr2


def check_parity(model: SageLayers, runner: LayersFn, blocks: list[Block], atol: float = 1e-5) -> float:
    """Largest |exported - eager| over ``blocks``; raises :class:`ParityError` above ``atol``."""
    eager = eager_runner(model)
    worst = 0.0
    for block in blocks:
        for name, got, want in zip(OUTPUT_NAMES, runner(*block), eager(*block), strict=True):
            if got.shape != want.shape:
                raise ParityError(f"{name}: shape {got.shape} from the export, {want.shape} from eager")
            worst = max(worst, float(np.max(np.abs(got - want), initial=0.0)))
    if worst > atol:
        raise ParityError(f"exported model differs from eager by {worst:.3g} (tolerance {atol:g})")
    return worst


def check_dense_parity(model: SageLayers, path: Path, atol: float = 1e-5, seeds: int = 3) -> float:
    """Largest |dense graph at ``path`` - eager SageLayers| over random blocks; ParityError above ``atol``."""
    cfg = model.config
    session = ort_session(path, 1)
    worst = 0.0
    for batch in (1, 3, 32)[:seeds]:
        x, nbr1, nbr2 = example_block(cfg.in_features, cfg.fanouts, batch=batch, seed=batch)
        a1, idx2, w2 = dense_inputs(x, np.arange(x.shape[0], dtype=np.int64), nbr1, nbr2)
        got = session.run(list(OUTPUT_NAMES), dict(zip(DENSE_INPUTS, (a1, idx2, w2), strict=True)))  # type: ignore[attr-defined]
        with torch.inference_mode():
            want = model(torch.from_numpy(x), torch.from_numpy(nbr1), torch.from_numpy(nbr2))
        for g, w in zip(got, want, strict=True):
            worst = max(worst, float(np.max(np.abs(g - w.numpy()))))
    if worst > atol:
        raise ParityError(f"dense graph differs from eager by {worst:.3g} (tolerance {atol:g})")
    return worst
