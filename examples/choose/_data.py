"""The command line of the module-factory SOURCEs in examples/choose that bring sample inputs
(resnet50.py, text_encoder.py): ``--out FOLDER --samples N`` writes ``FOLDER/<name>.npz``, the ``--data`` of
the example run. Imported by the scripts' ``main`` only: ``servelab convert`` loads a SOURCE without it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import numpy as np

__all__ = ["data_main"]


def data_main(doc: str, default_out: Path, name: str, key: str, samples: int,
              make: Callable[[int], np.ndarray]) -> None:
    """Parse ``--out`` and ``--samples`` (defaults ``default_out``, ``samples``) and save ``make(samples)``
    as array ``key`` of ``<out>/<name>.npz``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--samples", type=int, default=samples)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    np.savez(args.out / f"{name}.npz", **{key: make(args.samples)})
    print(f"data: {args.out / f'{name}.npz'}")
