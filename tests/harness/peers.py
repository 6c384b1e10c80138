"""Triton's own tools beside servelab: the real ``tritonserver`` (python backend) and perf_analyzer, both
unpacked under the repository's ``.peers/`` on first use (servelab.bench). A test skips, saying why, only
when a download is impossible; any other failure to install or start fails it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from servelab.bench._fetch import DownloadFailed
from servelab.bench.peers.base import Endpoint

__all__ = ["PEERS_DIR", "installed", "installed_perf_analyzer", "triton_serving"]

PEERS_DIR = Path(__file__).resolve().parents[2] / ".peers"


def installed(install: Callable[[], Any]) -> None:
    """Run ``install``; skip the test when its download cannot happen here."""
    try:
        install()
    except DownloadFailed as exc:
        pytest.skip(f"cannot download: {str(exc)[:400]}")


@contextlib.contextmanager
def triton_serving(folders: Iterable[Path]) -> Iterator[Endpoint]:
    """The real Triton serving these python-model folders (as they are) until the block ends."""
    from servelab.bench.peers.triton import TritonPeer

    with TritonPeer(PEERS_DIR) as peer:
        installed(peer.install)
        for folder in folders:
            peer.add_python_model(folder)
        yield peer.start()


def installed_perf_analyzer(**options: Any) -> Any:
    """perf_analyzer (installed) with these PerfAnalyzerOptions."""
    from servelab.bench.perf_analyzer import PerfAnalyzer, PerfAnalyzerOptions

    pa = PerfAnalyzer(PEERS_DIR, options=PerfAnalyzerOptions(**options))
    installed(pa.ensure)
    return pa
