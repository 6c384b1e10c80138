"""perf_analyzer (Triton's C++ load generator) against servelab with ``--shared-memory system``, HTTP and gRPC.

perf_analyzer creates its own POSIX regions, registers them through the shared-memory extension, sends
every input by region and asks for every output into its output region; the test watches the server's
region status while it runs. (perf_analyzer 2.40 cannot check outputs that came by shared memory: with
``validation_data`` it fails "Output size doesn't match expected size" against the real Triton too, so the
outputs' contents are checked by tests/integration/test_shared_memory.py.) perf_analyzer is unpacked under
``.peers/perf_analyzer`` on first use; the test skips only when that download is impossible.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from harness.servers import ServerProcess
from servelab.bench._fetch import DownloadFailed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PEERS_DIR = Path(__file__).resolve().parents[3] / ".peers"
A = np.arange(16, dtype=np.int32)
B = np.full(16, 5, dtype=np.int32)


@pytest.fixture(scope="module")
def perf_analyzer() -> Any:
    from servelab.bench.perf_analyzer import PerfAnalyzer

    pa = PerfAnalyzer(PEERS_DIR)
    try:
        pa.ensure()
    except DownloadFailed as exc:
        pytest.skip(f"cannot download perf_analyzer: {str(exc)[:400]}")
    return pa


def _input_file(path: Path) -> Path:
    path.write_text(json.dumps({"data": [{"INPUT0": A.tolist(), "INPUT1": B.tolist()}]}))
    return path


def _run(pa: Any, server: ServerProcess, protocol: str, data: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """perf_analyzer's result and the region names the server held while it ran."""
    url = server.grpc_address if protocol == "grpc" else server.http_address
    argv = [
        str(pa.binary), "-m", "simple", "-u", url, "-i", protocol, "--shared-memory", "system",
        "--output-shared-memory-size", str(A.nbytes), "--input-data", str(data), "--concurrency-range", "2",
        "--measurement-mode", "count_windows", "--measurement-request-count", "100", "-s", "1000", "-r", "3",
    ]  # fmt: skip
    seen: set[str] = set()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=pa.env()) as proc, \
            httpx.Client(base_url=server.http_url, timeout=10) as http:  # fmt: skip
        while proc.poll() is None:
            seen.update(r["name"] for r in http.get("/v2/systemsharedmemory/status").json())
        out = proc.stdout.read() if proc.stdout is not None else ""
    return subprocess.CompletedProcess(argv, proc.returncode, out, ""), seen


def _inferences(server: ServerProcess) -> int:
    stats = httpx.get(f"{server.http_url}/v2/models/simple/stats", timeout=10).json()
    return sum(int(s["inference_count"]) for s in stats["model_stats"])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_measures_through_system_shared_memory(
    perf_analyzer: Any, server: ServerProcess, tmp_path: Path, protocol: str
) -> None:
    before = _inferences(server)
    done, regions = _run(perf_analyzer, server, protocol, _input_file(tmp_path / "in.json"))
    assert done.returncode == 0, done.stdout[-3000:]
    assert "Throughput" in done.stdout
    assert _inferences(server) - before >= 300
    # it registered input and output regions (names of its own), and unregistered them at the end
    assert any("INPUT0" in r for r in regions) and any("OUTPUT0" in r for r in regions), regions
    assert httpx.get(f"{server.http_url}/v2/systemsharedmemory/status", timeout=10).json() == []
