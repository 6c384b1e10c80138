"""A real Prometheus (Debian's ``prometheus``) scrapes a real `servelab serve` on 127.0.0.1 while a split and
a rollout with live gates are serving, and every query of deploy/monitoring/grafana-dashboard.json returns
data (latency percentiles, throughput, batching, the split, the rollout's step and gates, shadow copies);
only the GPU panel may be empty (no GPU here).

Prometheus is found on PATH or installed the way the Makefile's ``prometheus`` target does (``apt-get
install prometheus`` when running as root); the test skips, saying why, only when neither works.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from routing_harness import KEY, build_routing_repository, infer_body, rollout

from harness.servers import ServerProcess, running_server
from servelab.bench.net import free_port

pytestmark = pytest.mark.timeout(900)
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "monitoring" / "grafana-dashboard.json"
#: panels allowed to be empty here: NVML metrics exist only on a GPU host
MAY_BE_EMPTY = {"GPU utilisation and memory (NVML; empty without a GPU)"}


def _prometheus() -> str:
    """The prometheus binary: on PATH, else installed with apt-get as root (as `make prometheus` does)."""
    found = shutil.which("prometheus")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "prometheus"]):
            subprocess.run(cmd, env=env, capture_output=True, timeout=900, check=False)
        found = shutil.which("prometheus")
    if found is None:
        pytest.skip("prometheus is not installed and cannot be (Debian: run `make prometheus` or "
                    "`apt-get install prometheus` as root)")
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = build_routing_repository(tmp_path_factory.mktemp("routing") / "models")
    env = {"SERVELAB_ROUTING__EVALUATE_EVERY_S": "0.2"}
    with running_server(repo, tmp_path_factory.mktemp("logs"), "scraped", "--management-key", KEY, env=env) as s:
        yield s


@pytest.fixture(scope="module")
def prometheus(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = _prometheus()
    folder = tmp_path_factory.mktemp("prometheus")
    config = folder / "prometheus.yml"
    config.write_text(json.dumps({  # YAML reads JSON
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "servelab", "metrics_path": "/metrics",
                            "static_configs": [{"targets": [f"127.0.0.1:{server.metrics_port}"]}]}],
    }))
    port = free_port()
    log = (folder / "prometheus.log").open("wb")
    process = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
                                f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _ready(url):
            assert process.poll() is None, (folder / "prometheus.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "prometheus did not get ready within 120 s"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class _Traffic:
    """Steady requests to the routed models from a thread, so that every rate has something to show."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.stop = threading.Event()
        self.failures: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=30) as client:
            while not self.stop.is_set():
                for model in ("ab", "split"):
                    r = client.post(f"/v2/models/{model}/infer", json=infer_body(model))
                    if r.status_code != 200:
                        self.failures.append(r.text)


def _queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"].replace("$model", ".*").replace("$__rate_interval", "20s"))
            for p in dash["panels"] for t in p["targets"]]


def _result(prometheus: str, expr: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=30)
    assert r.status_code == 200 and r.json()["status"] == "success", (expr, r.text)
    return r.json()["data"]["result"]  # type: ignore[no-any-return]


def test_every_dashboard_query_returns_data_from_a_real_prometheus(server: ServerProcess, prometheus: str) -> None:
    with httpx.Client(base_url=server.http_url, timeout=30) as http:
        gates = {"min_samples": 5, "max_abs_diff": 1e-5, "p99_slack_ms": 1000, "p99_max_increase": 10}
        spec = {"candidate": "2", "steps": [50, 100], "min_dwell_s": 3600, "agreement_sample": 1.0, "gates": gates}
        rollout(http, "ab", body=spec)
    traffic = _Traffic(server.http_url)
    traffic.thread.start()
    try:
        queries = _queries()
        assert len(queries) >= 25
        deadline = time.monotonic() + 120
        while True:  # rates need a few scrapes: ask again until every panel has data, or say which has none
            empty = [(title, expr) for title, expr in queries if title not in MAY_BE_EMPTY and not _result(prometheus, expr)]
            if not empty or time.monotonic() > deadline:
                break
            time.sleep(1.0)
    finally:
        traffic.stop.set()
        traffic.thread.join(timeout=60)
    assert not traffic.failures, traffic.failures[:3]
    assert not empty, "dashboard queries without data:\n" + "\n".join(f"{t}: {e}" for t, e in empty)
    with httpx.Client(base_url=server.http_url, timeout=30) as http:
        status = rollout(http, "ab")["rollout"]
    assert status["status"] == "running", status  # the gates held while Prometheus read them
    gates_seen = {s["metric"]["gate"] for s in _result(prometheus, "servelab_rollout_gate_passing == 1")}
    assert gates_seen == {"error_rate", "p99_ms", "max_abs_diff"}
    split = {s["metric"]["variant"]: float(s["value"][1]) for s in _result(prometheus, 'servelab_routing_traffic_share{model="split"}')}
    assert split == {"v1": 0.8, "v2": 0.2}
