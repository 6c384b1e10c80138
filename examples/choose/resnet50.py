"""The ResNet-50 architecture with random weights, built here in plain torch (no torchvision, no download).

As a ``servelab convert`` / ``select`` SOURCE this file is a module factory: ``make_model()`` returns the
network (batch-norm statistics set by a few forward passes on random images, so activations keep a sane
scale in every precision), ``example_inputs()`` one image batch. ``python examples/choose/resnet50.py --out
out/choose/resnet50`` writes ``images.npz`` (random images, the ``--data`` of the example run).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

input_names = ["image"]
output_names = ["logits"]
task = "classifier"
SEED = 0


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout),
        )  # fmt: skip
        self.skip = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.skip(x))


class ResNet50(nn.Module):
    """conv1 -> 4 stages of bottlenecks (3, 4, 6, 3) -> global pool -> 1000 logits."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                   nn.MaxPool2d(3, 2, 1)]  # fmt: skip
        cin = 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(blocks):
                layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * Bottleneck.expansion
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(image), 1), 1))


def images(n: int, size: int = 224, seed: int = SEED) -> np.ndarray:
    """Random normalised 'images' (float32 [n, 3, size, size])."""
    return np.random.default_rng(seed).standard_normal((n, 3, size, size)).astype(np.float32)


def make_model() -> nn.Module:
    torch.manual_seed(SEED)
    model = ResNet50()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = None  # cumulative average over the calibration passes
    model.train()
    with torch.no_grad():
        for i in range(2):
            model(torch.from_numpy(images(4, seed=100 + i)))
    return model.eval()


def example_inputs() -> torch.Tensor:
    return torch.from_numpy(images(2))


if __name__ == "__main__":
    from _data import data_main  # beside this file, on sys.path when it runs as a script

    data_main(__doc__, Path("out/choose/resnet50"), "images", "image", 64, lambda n: images(n, seed=SEED + 7))
