"""The command line every repository builder of examples/ shares (build_repository.py here,
sequence_models/ and triton_models/): ``--out FOLDER`` (default ``<the script's folder>/repository``),
build there, say what was written. Imported by the scripts' ``main`` only, so loading a builder by path
(as the tests and benchmarks do) needs nothing of this."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = ["build_main"]


def build_main(doc: str | None, build: Callable[[Path], Path], here: Path, what: str,
               names: Iterable[str] | None = None) -> None:
    """Parse ``--out``, run ``build(out)`` and print ``what`` and ``names`` (default: the folders written)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=here / "repository")
    args = parser.parse_args()
    path = build(args.out)
    listed = sorted(p.name for p in path.iterdir()) if names is None else names
    print(f"{what} written to {path}: {', '.join(listed)}")
