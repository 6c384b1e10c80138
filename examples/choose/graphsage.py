"""The GraphSAGE layers (servelab.graph.model.SageLayers: 2 mean-aggregator layers + head) on random weights.

The ``graphsage_layers`` model that ``servelab graph export`` writes, here as a ``servelab convert`` /
``select`` SOURCE: a module factory whose model does not batch. One request is one sampled 2-hop block,
x float32 [n_all, 128], nbr1 int64 [n1, 10], nbr2 int64 [B, 10] -> logits [B, 16], embeddings [B, 256], each
input with its own leading dimension, so the file says ``max_batch_size = 0`` and names its dynamic axes.

    python examples/choose/graphsage.py --out out/choose/graphsage

writes ``block.npz`` (one request: a padded block from the graph export's example block,
:func:`servelab.graph.parity.example_block`, with the sizes a batch of ``--seeds`` seed nodes samples at
fan-outs 10,10), the ``--data`` of ``servelab select examples/choose/graphsage.py:make_model --data
out/choose/graphsage/block.npz``. Nothing is downloaded; no graph is needed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from servelab.graph.model import SageConfig, SageLayers
from servelab.graph.parity import example_block

input_names = ["x", "nbr1", "nbr2"]
output_names = ["logits", "embeddings"]
task = "other"  # logits and embeddings are both judged by their relative error
max_batch_size = 0  # x, nbr1 and nbr2 have leading dimensions of their own: no shared batch axis
dynamic_axes = {
    "x": {0: "n_all"}, "nbr1": {0: "n1"}, "nbr2": {0: "batch"}, "logits": {0: "batch"}, "embeddings": {0: "batch"},
}  # fmt: skip
FEATURES, CLASSES, HIDDEN, FANOUTS = 128, 16, 256, (10, 10)
SEED = 0


def block(seeds: int, seed: int = SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One request for ``seeds`` seed nodes: first hop ``seeds * 10`` rows, second ``n1 * 10`` (no overlap)."""
    hop1 = seeds * FANOUTS[0]
    hop2 = (seeds + hop1) * FANOUTS[1]
    return example_block(FEATURES, FANOUTS, batch=seeds, hop1=hop1, hop2=hop2, seed=seed)


def make_model() -> torch.nn.Module:
    torch.manual_seed(SEED)
    return SageLayers(SageConfig(FEATURES, CLASSES, hidden=HIDDEN, aggregator="mean", fanouts=FANOUTS)).eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    return tuple(torch.from_numpy(a) for a in block(2, seed=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/choose/graphsage"))
    parser.add_argument("--seeds", type=int, default=4, help="seed nodes of the request (its batch)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    x, nbr1, nbr2 = block(args.seeds, seed=SEED + 7)
    np.savez(args.out / "block.npz", x=x, nbr1=nbr1, nbr2=nbr2)
    print(f"data: {args.out / 'block.npz'} (x {list(x.shape)}, nbr1 {list(nbr1.shape)}, nbr2 {list(nbr2.shape)})")


if __name__ == "__main__":
    main()
