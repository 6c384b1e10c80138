"""SIGTERM drains: a request in flight completes, new connections are refused meanwhile, the process
exits 0. The request is held inside the ``gated`` model until the server has stopped listening."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from harness.gates import SocketGate
from harness.repository import add_gated_model
from harness.servers import ServerProcess

BODY = {"inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "FP32", "data": [4.5]}]}


def test_sigterm_lets_in_flight_request_finish(tmp_path: Path, gate: SocketGate) -> None:
    repo = tmp_path / "repo"
    add_gated_model(repo, gate.port)
    server = ServerProcess(repo, tmp_path / "drain.log").start()
    result: dict[str, object] = {}

    def request() -> None:
        with httpx.Client(timeout=60) as client:
            r = client.post(f"{server.http_url}/v2/models/gated/infer", json=BODY)
        result.update(status=r.status_code, body=r.json())

    try:
        thread = threading.Thread(target=request)
        thread.start()
        with gate.wait_entered() as held:  # the request is inside the model
            server.terminate()
            assert _refused_soon(server.http_url), "the server still accepts connections after SIGTERM"
            assert not result, "the request finished before it was released"
            held.release()
        thread.join(timeout=60)
        code = server.wait(timeout_s=30)
    finally:
        server.stop()
    assert result["status"] == 200, result
    assert result["body"]["outputs"][0]["data"] == [4.5]  # type: ignore[index]
    assert code == 0, server.log_tail()
    assert "servelab stopped" in server.log_tail()


def _refused_soon(url: str, timeout_s: float = 30.0) -> bool:
    """True once a fresh connection is refused (the listener closes as the drain begins). A connection the
    kernel had queued just as the listener closed is reset instead of refused: not served either."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/v2/health/live", timeout=2)
        except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
            return True
    return False
