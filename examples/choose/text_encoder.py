"""A small transformer text encoder built here (2 layers, width 128, 4 heads, 32 tokens): token ids -> an embedding.

A module factory SOURCE for ``servelab convert`` / ``select`` (``make_model``, ``example_inputs``); attention is
written with plain matmuls so every exporter takes it. ``python examples/choose/text_encoder.py --out
out/choose/text`` writes ``tokens.npz`` (random token ids), the ``--data`` of the example run.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

input_names = ["tokens"]
output_names = ["embedding"]
task = "other"
VOCAB, SEQ, WIDTH, HEADS, LAYERS = 8000, 32, 128, 4, 2
SEED = 0


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.norm1 = nn.LayerNorm(WIDTH)
        self.norm2 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, HEADS, WIDTH // HEADS).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(WIDTH // HEADS), dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, WIDTH))
        return x + self.mlp(self.norm2(x))


class TextEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Parameter(torch.randn(1, SEQ, WIDTH) * 0.02)
        self.blocks = nn.Sequential(*[Block() for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(WIDTH)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.embed(tokens) + self.pos)
        return self.norm(x).mean(dim=1)


def tokens(n: int, seed: int = SEED) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 100, size=(n, SEQ)).astype(np.int64)


def make_model() -> nn.Module:
    torch.manual_seed(SEED)
    return TextEncoder().eval()


def example_inputs() -> torch.Tensor:
    return torch.from_numpy(tokens(2))


if __name__ == "__main__":
    from _data import data_main  # beside this file, on sys.path when it runs as a script

    data_main(__doc__, Path("out/choose/text"), "tokens", "tokens", 512, lambda n: tokens(n, seed=SEED + 7))
