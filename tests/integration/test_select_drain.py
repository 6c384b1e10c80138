"""select's wait for a served backlog to drain reads the real server's OIP statistics."""

from __future__ import annotations

import json
import threading
import time

from harness.servers import ServerProcess
from servelab.advisor.wire import executions, wait_drained
from servelab.bench.net import http_status

_BODY = json.dumps({"inputs": [
    {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
]}).encode()  # fmt: skip


def _infer(url: str, n: int) -> None:
    for _ in range(n):
        status, _ = http_status(f"{url}/v2/models/simple/infer", "POST", _BODY)
        assert status == 200


def test_executions_count_what_the_server_ran_and_the_wait_ends_when_it_stops(server: ServerProcess) -> None:
    url = server.http_url
    before = executions(url, "simple")
    assert before is not None
    _infer(url, 5)
    assert executions(url, "simple") == before + 5
    assert wait_drained(url, "simple") < 2.0  # idle: two equal polls and done
    sender = threading.Thread(target=_infer, args=(url, 400))
    sender.start()
    time.sleep(0.1)
    waited = wait_drained(url, "simple", poll_s=0.05)  # busy: waits while the count grows
    sender.join()
    assert waited > 0.05 and executions(url, "simple") == before + 405
    assert executions(url, "no_such_model") is None
