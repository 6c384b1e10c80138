"""Worker processes under a real `servelab serve`: a killed worker, a hung python model, SIGTERM with a
stuck worker, and the TorchServe scale cap.

The python model ``hang`` blocks forever on an input > 0 (a hung call) and otherwise answers its pid;
``fast`` is an ONNX identity that keeps serving while ``hang`` is stuck or restarting.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from harness.models import XY, pid_py, unary_onnx
from harness.repository import pid_model, write_config
from harness.servers import ServerProcess, running_server

REQUEST_TIMEOUT_S = 2.0
KILL_TIMEOUT_S = 2.0
RESTART_BACKOFF_S = 3.0  # long enough to see the model not ready before the worker is back
MAX_WORKERS = 2

def _build(repo: Path) -> Path:
    pid_model(repo, "hang", pid_py(hang_on_positive=True), [1], max_batch_size=0)
    unary_onnx(repo / "fast" / "1" / "model.onnx", io=XY)
    write_config(repo / "fast", 'name: "fast"\nbackend: "onnxruntime"\nmax_batch_size: 8\n')
    settings = {"workers": {"kill_timeout_s": KILL_TIMEOUT_S, "restart_backoff_s": RESTART_BACKOFF_S,
                            "max_workers_per_model": MAX_WORKERS}}
    (repo.parent / "settings.json").write_text(json.dumps(settings))
    return repo


def _flags(repo: Path) -> list[str]:
    return ["--settings", str(repo.parent / "settings.json"), "--request-timeout-s", str(REQUEST_TIMEOUT_S),
            "--model-control-mode", "explicit", "--load-model", "*"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory.mktemp("workers") / "models")


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(repo, tmp_path_factory.mktemp("logs"), "workers", *_flags(repo)) as s:
        yield s


def _hang_body(value: float) -> dict[str, object]:
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [value]}]}


FAST_BODY = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}


def _worker(client: httpx.Client, server: ServerProcess) -> dict[str, object]:
    stats = client.get(f"{server.http_url}/v2/models/hang/stats").json()
    return stats["model_stats"][0]["workers"][0]  # type: ignore[no-any-return]


def _until(predicate: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)  # poll interval, not synchronisation


def _hang_in_background(pool: ThreadPoolExecutor, server: ServerProcess) -> Future[httpx.Response]:
    def post() -> httpx.Response:
        with httpx.Client(timeout=60.0) as c:
            return c.post(f"{server.http_url}/v2/models/hang/infer", json=_hang_body(1.0))

    return pool.submit(post)


def test_a_killed_worker_fails_its_request_503_and_is_restarted(server: ServerProcess) -> None:
    with httpx.Client(timeout=30.0) as client, ThreadPoolExecutor(1) as pool:
        pid = int(_worker(client, server)["pid"])  # type: ignore[call-overload]
        pending = _hang_in_background(pool, server)
        _until(lambda: _worker(client, server)["busy"])
        os.kill(pid, signal.SIGKILL)
        answer = pending.result(timeout=30)
        assert answer.status_code == 503
        message = answer.json()["error"]
        assert "model 'hang'" in message and "SIGKILL" in message
        ready = client.get(f"{server.http_url}/v2/models/hang/ready")
        assert ready.status_code == 503 and "not ready" in ready.text
        assert client.post(f"{server.http_url}/v2/models/fast/infer", json=FAST_BODY).status_code == 200
        _until(lambda: client.get(f"{server.http_url}/v2/models/hang/ready").status_code == 200)
        worker = _worker(client, server)
        assert worker["restarts"] == 1 and worker["pid"] != pid and "SIGKILL" in str(worker["last_exit"])
        out = client.post(f"{server.http_url}/v2/models/hang/infer", json=_hang_body(0.0))
        assert out.status_code == 200 and out.json()["outputs"][1]["data"] == [worker["pid"]]


def test_a_hung_model_is_answered_503_at_the_deadline_while_another_keeps_p99_under_50ms(
    server: ServerProcess,
) -> None:
    latencies: list[float] = []
    with httpx.Client(timeout=30.0) as client, ThreadPoolExecutor(1) as pool:
        client.post(f"{server.http_url}/v2/models/fast/infer", json=FAST_BODY)  # connection warm
        restarts = int(_worker(client, server)["restarts"])  # type: ignore[call-overload]
        start = time.monotonic()
        pending = _hang_in_background(pool, server)
        while not pending.done():
            t0 = time.perf_counter()
            reply = client.post(f"{server.http_url}/v2/models/fast/infer", json=FAST_BODY)
            latencies.append(time.perf_counter() - t0)
            assert reply.status_code == 200
        elapsed = time.monotonic() - start
        answer = pending.result()
        assert answer.status_code == 503 and "did not answer within 2 s" in answer.json()["error"]
        assert REQUEST_TIMEOUT_S - 0.1 <= elapsed < REQUEST_TIMEOUT_S + 3.0
        p99 = float(np.percentile(latencies, 99))
        assert len(latencies) >= 20 and p99 < 0.050, f"P99 {p99 * 1e3:.1f} ms over {len(latencies)} requests"
        # past the kill deadline the stuck worker is killed and replaced
        _until(lambda: int(_worker(client, server)["restarts"]) == restarts + 1)  # type: ignore[call-overload]
        assert "stuck" in str(_worker(client, server)["last_exit"])
        _until(lambda: client.get(f"{server.http_url}/v2/models/hang/ready").status_code == 200)
        assert client.post(f"{server.http_url}/v2/models/hang/infer", json=_hang_body(0.0)).status_code == 200


def test_the_torchserve_scale_api_refuses_more_workers_than_the_cap(server: ServerProcess) -> None:
    with httpx.Client(timeout=60.0) as client:
        refused = client.put(f"{server.management_url}/models/hang", params={"min_worker": MAX_WORKERS + 1})
        assert refused.status_code == 400
        assert f"more than the {MAX_WORKERS} workers" in refused.json()["message"]
        assert client.put(f"{server.management_url}/models/hang", params={"min_worker": MAX_WORKERS}).status_code == 200
        workers = client.get(f"{server.http_url}/v2/models/hang/stats").json()["model_stats"][0]["workers"]
        assert len(workers) == MAX_WORKERS and len({w["pid"] for w in workers}) == MAX_WORKERS


def test_sigterm_with_a_stuck_worker_exits_within_the_exit_timeout(repo: Path, tmp_path: Path) -> None:
    exit_timeout_s = 6.0
    server = ServerProcess(repo, tmp_path / "sigterm.log", [*_flags(repo), "--exit-timeout-secs", str(exit_timeout_s)])
    server.start()
    try:
        with httpx.Client(timeout=30.0) as client, ThreadPoolExecutor(1) as pool:
            pid = int(_worker(client, server)["pid"])  # type: ignore[call-overload]
            pending = _hang_in_background(pool, server)
            _until(lambda: _worker(client, server)["busy"])
            start = time.monotonic()
            server.terminate()
            code = server.wait(timeout_s=exit_timeout_s + 10)
            elapsed = time.monotonic() - start
            with pytest.raises(httpx.HTTPError):  # the stuck request was cut at the end of the grace
                pending.result(timeout=10).raise_for_status()
    finally:
        server.stop()
    assert code == 0, server.log_tail()
    assert elapsed < exit_timeout_s, f"exit took {elapsed:.1f} s:\n{server.log_tail()}"
    _until(lambda: not Path(f"/proc/{pid}").exists(), 10.0)  # the stuck worker is gone too
