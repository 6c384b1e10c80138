"""A measuring process stopped with SIGTERM (what ``timeout`` and CI send) stops the servers it started.

Python's default SIGTERM ends a process at once, skipping ``finally`` blocks, so every ``servelab serve`` a
``servelab compare`` or a benchmark had started was left running, holding ports and cores. The CLI and the
benchmarks call :func:`servelab.config.signals.exit_on_sigterm`; these runs check it end to end: a real
``servelab compare`` and a script with a real ``servelab serve`` child, SIGTERM'd while they measure.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.repository import tiny_repository


def _children_once_serving(parent: subprocess.Popen[bytes], timeout_s: float = 90.0) -> list[psutil.Process]:
    """The parent's descendants once one of them is a ``servelab ... serve`` that has run for a moment."""
    deadline = time.monotonic() + timeout_s
    me = psutil.Process(parent.pid)
    while time.monotonic() < deadline:
        assert parent.poll() is None, f"the parent exited early with {parent.returncode}"
        kids = me.children(recursive=True)
        serving = [k for k in kids if "serve" in " ".join(k.cmdline())]
        if serving and time.time() - min(k.create_time() for k in serving) > 5.0:
            return kids
        time.sleep(0.5)
    pytest.fail("no `servelab serve` child appeared")


def _sigterm_and_check(parent: subprocess.Popen[bytes], kids: list[psutil.Process]) -> None:
    parent.send_signal(signal.SIGTERM)
    try:
        code = parent.wait(timeout=60)
    except subprocess.TimeoutExpired:
        parent.kill()
        raise
    _, alive = psutil.wait_procs(kids, timeout=30)
    for k in alive:  # do not leave them behind even when the check fails
        k.kill()
    assert not alive, f"left running after SIGTERM: {[k.cmdline() for k in alive]}"
    assert code == 128 + signal.SIGTERM, code


def test_compare_stopped_with_sigterm_stops_its_servelab_server(tmp_path: Path) -> None:
    repo = tiny_repository(tmp_path / "repo")
    argv = [sys.executable, "-m", "servelab.cli", "compare", "tiny", "--repo", str(repo), "--targets",
            "servelab-onnxruntime", "--baseline", "servelab-onnxruntime", "--rounds", "50",
            "--measurement-interval-ms", "2000", "--output", str(tmp_path / "out.json")]  # fmt: skip
    parent = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        _sigterm_and_check(parent, _children_once_serving(parent))
    finally:
        if parent.poll() is None:
            parent.kill()


def test_a_benchmark_script_stopped_with_sigterm_stops_its_server(tmp_path: Path) -> None:
    repo = tiny_repository(tmp_path / "repo")
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from servelab.bench.serverproc import servelab_serve\n"
        "from servelab.config.signals import exit_on_sigterm\n"
        "exit_on_sigterm()\n"
        "with servelab_serve(Path(sys.argv[1])):\n"
        "    time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script, str(repo)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        _sigterm_and_check(parent, _children_once_serving(parent))
    finally:
        if parent.poll() is None:
            parent.kill()
