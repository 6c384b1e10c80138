"""``servelab serve --processes 2``: two processes on the same ports (SO_REUSEPORT) answer as one server.

The python model ``pid`` runs inline (instance_mode thread), so each answer carries the PID of the process
that served it. Every request below goes on a fresh connection, which the kernel hands to either process:
40 of them reach both (all on one: 2^-39). What must stay one server's is checked from every side: the
statistics (REST, gRPC, /metrics) count every process's requests whichever is asked, a model unloaded or
loaded, and a shared-memory region registered, over one connection holds for the next connection
whichever process takes it; rollouts are refused; a killed copy is started again with the models the
leader serves; SIGTERM stops all.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as client_shm

from harness.models import pid_py
from harness.repository import pid_model
from harness.servers import ServerProcess, running_server
from harness.shm import ClientRegions

pytestmark = pytest.mark.timeout(300)

INLINE = 'parameters { key: "instance_mode" value { string_value: "thread" } }'
FLAGS = ("--processes", "2", "--model-control-mode", "explicit", "--load-model", "*")
BODY = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [2.5]}]}
FRESH = 40


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("processes") / "models"
    pid_model(repo, "pid", pid_py(), [1], max_batch_size=0, extra=INLINE)
    pid_model(repo, "other", pid_py(), [1], max_batch_size=0, extra=INLINE)
    return repo


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(repo, tmp_path_factory.mktemp("logs"), "processes", *FLAGS) as s:
        yield s


def _pids(server: ServerProcess) -> list[int]:
    """The PIDs the server printed (SERVELAB_PROCESSES), the leader first."""
    found = re.findall(r"^SERVELAB_PROCESSES (.*)$", server.log_tail(10**6), re.M)
    assert found, f"no SERVELAB_PROCESSES line:\n{server.log_tail()}"
    return list(json.loads(found[-1])["pids"])


def _served_by(server: ServerProcess) -> int:
    """One inference on a fresh connection: the PID that answered it."""
    with httpx.Client(timeout=10.0) as c:
        r = c.post(f"{server.http_url}/v2/models/pid/infer", json=BODY)
    assert r.status_code == 200, r.text
    outputs = {o["name"]: o["data"] for o in r.json()["outputs"]}
    assert outputs["y"] == [2.5]
    return int(outputs["pid"][0])


def _count(server: ServerProcess) -> int:
    with httpx.Client(timeout=10.0) as c:
        return int(c.get(f"{server.http_url}/v2/models/pid/stats").json()["model_stats"][0]["inference_count"])


def _statuses(server: ServerProcess, path: str, n: int = 12) -> set[int]:
    out = set()
    for _ in range(n):
        with httpx.Client(timeout=10.0) as c:
            out.add(c.get(f"{server.http_url}{path}").status_code)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state


def test_both_processes_answer_and_every_statistic_counts_both(server: ServerProcess) -> None:
    pids = _pids(server)
    assert len(pids) == 2 and pids[0] == server.process.pid  # type: ignore[union-attr]
    before = _count(server)
    served = [_served_by(server) for _ in range(FRESH)]
    assert set(served) == set(pids), f"answered by {sorted(set(served))}, the server's processes are {pids}"
    assert {_count(server) for _ in range(6)} == {before + FRESH}  # whichever process is asked
    with grpcclient.InferenceServerClient(server.grpc_address) as g:
        stats = g.get_inference_statistics("pid", as_json=True)
    assert int(stats["model_stats"][0]["inference_count"]) == before + FRESH
    for _ in range(4):
        with httpx.Client(timeout=10.0) as c:
            text = c.get(f"{server.metrics_url}/metrics").text
        line = re.search(r'^nv_inference_count\{model="pid",version="1"\} (\S+)$', text, re.M)
        assert line is not None and float(line.group(1)) == before + FRESH


def test_an_unload_and_a_load_over_one_connection_hold_in_every_process(server: ServerProcess) -> None:
    with httpx.Client(timeout=30.0) as c:
        assert c.post(f"{server.http_url}/v2/repository/models/pid/unload", json={}).status_code == 200
    assert _statuses(server, "/v2/models/pid/ready") == {503}
    with httpx.Client(timeout=60.0) as c:
        assert c.post(f"{server.http_url}/v2/repository/models/pid/load", json={}).status_code == 200
    assert _statuses(server, "/v2/models/pid/ready") == {200}


def test_a_shared_memory_region_registered_once_serves_both_processes(server: ServerProcess) -> None:
    x = np.array([7.0], dtype=np.float32)
    with ClientRegions("procs") as regions:
        handle, key = regions.create("x", x.nbytes)
        client_shm.set_shared_memory_region(handle, [x])
        with httpclient.InferenceServerClient(server.http_address) as c:
            c.register_system_shared_memory("x", key, x.nbytes)
        try:
            served = set()
            for _ in range(FRESH // 2):
                with httpclient.InferenceServerClient(server.http_address) as c:  # a new connection each
                    given = httpclient.InferInput("x", [1], "FP32")
                    given.set_shared_memory("x", x.nbytes)
                    result = c.infer("pid", [given])
                np.testing.assert_array_equal(result.as_numpy("y"), x)
                served.add(int(result.as_numpy("pid")[0]))
            assert served == set(_pids(server))
        finally:
            with httpclient.InferenceServerClient(server.http_address) as c:
                c.unregister_system_shared_memory("x")
        for _ in range(6):
            with httpclient.InferenceServerClient(server.http_address) as c:
                assert c.get_system_shared_memory_status() == []


def test_rollouts_are_refused_with_several_processes(server: ServerProcess) -> None:
    with httpx.Client(timeout=10.0) as c:
        r = c.post(f"{server.http_url}/v2/models/pid/rollout", json={"candidate": "1"})
    assert r.status_code == 501 and "--processes 1" in r.json()["error"]


def test_a_killed_copy_is_started_again_with_what_the_leader_serves(server: ServerProcess) -> None:
    leader, copy = _pids(server)
    with httpx.Client(timeout=30.0) as c:  # unloaded since the start: the restarted copy must not load it
        assert c.post(f"{server.http_url}/v2/repository/models/other/unload", json={}).status_code == 200
    os.kill(copy, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _alive(copy):
        assert time.monotonic() < deadline
        time.sleep(0.05)  # poll interval
    new: set[int] = set()
    deadline = time.monotonic() + 90
    while not new:  # every request is answered while the copy restarts: by the leader, then by either
        assert time.monotonic() < deadline, f"no new copy answered:\n{server.log_tail()}"
        served = {_served_by(server) for _ in range(10)}
        assert copy not in served
        new = served - {leader}
    assert f"server process 1 (pid {copy}) exited" in server.log_tail(10**6)
    assert _statuses(server, "/v2/models/other/ready", 20) <= {404, 503}  # not ready: unloaded, or never loaded
    assert _statuses(server, "/v2/models/pid/ready", 20) == {200}


def test_sigterm_stops_every_process(repo: Path, tmp_path: Path) -> None:
    with running_server(repo, tmp_path, "processes-stop", *FLAGS) as s:
        pids = _pids(s)
        assert {_served_by(s) for _ in range(FRESH)} == set(pids)
    deadline = time.monotonic() + 15  # running_server checked the leader exited 0
    while any(_alive(p) for p in pids):
        assert time.monotonic() < deadline, f"still running: {[p for p in pids if _alive(p)]}"
        time.sleep(0.05)  # poll interval


def test_a_tfserving_config_with_several_processes_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "models.config"
    config.write_text('model_config_list { config { name: "m" base_path: "/nonexistent" } }\n')
    s = ServerProcess(tmp_path, tmp_path / "refused.log", ["--tfserving-config", str(config), "--processes", "2"])
    s.target_args = lambda: []  # type: ignore[method-assign]
    s.launch()
    assert s.wait(60) == 2
    assert "--processes > 1 serves a Triton-style model repository only" in s.log_tail()
