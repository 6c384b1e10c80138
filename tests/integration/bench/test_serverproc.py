"""servelab.bench.serverproc, the child-process helper the benchmarks start servers with: a real
``servelab serve`` ready on its own ports and stopped with exit code 0, and a server that dies before it
is ready named with its exit code and log."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from servelab.bench.net import free_port
from servelab.bench.serverproc import running, servelab_serve
from servelab.errors import Unavailable


def test_servelab_serve_is_ready_on_its_ports_and_exits_0(test_repository: Path, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    flags = ("--model-control-mode", "explicit", "--load-model", "simple")
    with servelab_serve(test_repository, *flags, env={"OMP_NUM_THREADS": "1"}, log=log) as server:
        assert server.ports is not None and server.exited() is None
        ready = httpx.get(f"{server.ports.http_url}/v2/models/simple/ready", timeout=10)
        assert ready.status_code == 200
        assert httpx.get(f"{server.ports.metrics_url}/metrics", timeout=10).status_code == 200
    assert server.exit_code == 0, log.read_text()[-2000:]


def test_a_server_that_dies_before_ready_is_named_with_its_code_and_log(tmp_path: Path) -> None:
    log = tmp_path / "dies.log"
    argv = [sys.executable, "-c", "import sys; print('no model here', flush=True); sys.exit(3)"]
    with pytest.raises(Unavailable, match=r"exit code 3: no model here"), \
            running(argv, f"http://127.0.0.1:{free_port()}/v2/health/ready", log=log):
        pass  # fmt: skip
