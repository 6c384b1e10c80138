"""SIGTERM drains: a slow request in flight completes, new connections are refused, the process exits 0."""

from __future__ import annotations

import threading
import time

import httpx
from repo_builder import SLOW_S

SLOW_BODY = {"inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "FP32", "data": [4.5]}]}


def test_sigterm_lets_in_flight_request_finish(server_factory) -> None:  # type: ignore[no-untyped-def]
    server = server_factory("drain", "--model-control-mode", "explicit", "--load-model", "slow")
    result: dict[str, object] = {}

    def slow_request() -> None:
        t0 = time.monotonic()
        with httpx.Client(timeout=30) as client:
            r = client.post(f"{server.http_url}/v2/models/slow/infer", json=SLOW_BODY)
        result.update(status=r.status_code, body=r.json(), started=t0, done=time.monotonic())

    try:
        thread = threading.Thread(target=slow_request)
        thread.start()
        time.sleep(SLOW_S / 3)  # place the signal inside the request's SLOW_S window
        signalled = time.monotonic()
        server.terminate()
        thread.join(timeout=30)
        code = server.wait(timeout_s=30)
    finally:
        server.stop()
    assert result["status"] == 200, result
    assert result["body"]["outputs"][0]["data"] == [4.5]  # type: ignore[index]
    assert result["started"] < signalled < result["done"]  # type: ignore[operator]
    assert code == 0, server.log_tail()
    assert "servelab stopped" in server.log_tail()
    try:
        httpx.get(f"{server.http_url}/v2/health/live", timeout=2)
        raise AssertionError("the server still accepts connections after exiting")
    except httpx.TransportError:
        pass
