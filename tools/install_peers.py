"""Install every peer environment the suite and the benchmarks use, under the repository's ``.peers/``.

The peers install themselves on first use (a test's fixture, ``servelab compare``); this script only does
it ahead of time, so that ``make test`` can run it beside ``make lint`` instead of inside the suite. Each
install is skipped when its stamp says it is there. A peer that cannot be installed (no Java, no network)
is reported and the script goes on: the tests that need it say why they skip or fail.

    python tools/install_peers.py [--peers-dir .peers]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from servelab.errors import ServelabError

ROOT = Path(__file__).resolve().parents[1]


def _installers(peers_dir: Path) -> list[tuple[str, Callable[[], None]]]:
    from servelab.bench.peers._triton_install import TritonInstall
    from servelab.bench.peers.mlserver import MLServerPeer
    from servelab.bench.peers.torchserve import TorchServePeer
    from servelab.bench.perf_analyzer import PerfAnalyzer

    triton = TritonInstall(peers_dir)
    return [
        ("torchserve", TorchServePeer(peers_dir, work_dir=peers_dir).install),
        ("mlserver", MLServerPeer(peers_dir, work_dir=peers_dir).install),
        ("triton", lambda: triton.ensure_packages("graphsage")),
        ("perf_analyzer", PerfAnalyzer(peers_dir).ensure),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers-dir", type=Path, default=ROOT / ".peers")
    args = parser.parse_args(argv)
    for name, install in _installers(args.peers_dir):
        start = time.perf_counter()
        try:
            install()
        except ServelabError as exc:
            print(f"peers: {name} not installed: {str(exc)[:300]}", flush=True)
            continue
        print(f"peers: {name} ready ({time.perf_counter() - start:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
