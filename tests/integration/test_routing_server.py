"""Routing against a real `servelab serve` (management key set, rollout state in sqlite, gates evaluated
every 0.1 s): weights and stickiness of a split, labels through tritonclient, TF Serving and TorchServe
URLs, clear 404s, a good candidate promoted through every step by the CLI, degraded candidates (slower,
wrong outputs) rolled back with the reason over REST and gRPC, and a restart mid-rollout resuming at its step.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from routing_harness import AUTH, KEY, X, build_routing_repository, drive, infer_body, rollout
from tritonclient.utils import InferenceServerException

from harness.clients import infer_input
from harness.servers import ServerProcess, running_server
from servelab.protocol import rollout_pb2 as rpb
from servelab.protocol import rollout_pb2_grpc as rpb_grpc

pytestmark = pytest.mark.timeout(600)
ENV = {"SERVELAB_ROUTING__EVALUATE_EVERY_S": "0.1"}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_routing_repository(tmp_path_factory.mktemp("routing") / "models")


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    state = tmp_path_factory.mktemp("state") / "routing.sqlite"
    with running_server(repo, tmp_path_factory.mktemp("logs"), "routing", "--management-key", KEY,
                        "--routing-state", str(state), env=ENV) as s:
        yield s


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=30.0) as client:
        yield client


def _version(http: httpx.Client, model: str, headers: dict[str, str] | None = None,
             parameters: dict[str, Any] | None = None, version: str = "") -> str:
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    r = http.post(path, json=infer_body(model, parameters), headers=headers)
    assert r.status_code == 200, r.text
    return str(r.json()["model_version"])


def _within(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


# ----- splits -----
def test_split_weights_are_honoured_within_binomial_tolerance(http: httpx.Client) -> None:
    n = 1000
    versions = Counter(_version(http, "split") for _ in range(n))
    assert set(versions) == {"1", "2"}
    assert _within(versions["2"], n, 0.2), versions


def test_one_key_stays_on_one_variant_over_rest_and_grpc(http: httpx.Client, server: ServerProcess) -> None:
    users = [f"user-{i}" for i in range(200)]
    by_parameter = {u: {_version(http, "split", parameters={"user": u}) for _ in range(3)} for u in users}
    assert all(len(v) == 1 for v in by_parameter.values()), by_parameter
    by_header = {u: _version(http, "split", headers={"x-user-id": u}) for u in users}
    assert by_header == {u: v.pop() for u, v in by_parameter.items()}  # one hash, whichever source the key had
    assert _within(sum(v == "2" for v in by_header.values()), len(users), 0.2)
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        for u in users[:40]:
            result = client.infer("split", [infer_input(grpcclient, "x", X)], headers={"x-user-id": u})
            assert result.get_response().model_version == by_header[u]


# ----- labels and 404s -----
def test_labels_work_through_tritonclient_http_and_grpc(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_address) as h, \
            grpcclient.InferenceServerClient(server.grpc_address) as g:
        for module, client in ((httpclient, h), (grpcclient, g)):
            result = client.infer("ab", [infer_input(module, "x", X)], model_version="stable")
            version = result.get_response()["model_version"] if module is httpclient else \
                result.get_response().model_version
            assert version == "1" and np.allclose(result.as_numpy("y"), 2 * X)
            assert client.is_model_ready("ab", "stable")
        assert h.get_model_metadata("ab", "stable")["versions"] == ["1", "2", "3"]


def test_labels_work_through_tf_serving_and_torchserve_urls(http: httpx.Client) -> None:
    r = http.post("/v1/models/ab/labels/stable:predict", json={"instances": X.tolist()})
    assert r.status_code == 200 and np.allclose(r.json()["predictions"], 2 * X), r.text
    assert http.get("/v1/models/ab/labels/stable").json()["model_version_status"][0]["version"] == "1"
    r = http.post("/predictions/ab/stable", json=X.tolist())
    assert r.status_code == 200 and np.allclose(r.json(), 2 * X)


@pytest.mark.parametrize(("path", "needle"), [
    ("/v2/models/ab/versions/nosuch/infer", "model 'ab' has no version label 'nosuch'; its labels: ['stable']"),
    ("/v2/models/ab/versions/9/infer", "Request for unknown model: 'ab' version 9 is not found; loaded versions: [1, 2, 3]"),
    ("/v2/models/slowpy/versions/canary/infer", "model 'slowpy' has no version label 'canary' (it has no labels)"),
    ("/v1/models/ab/labels/nosuch:predict", "Unrecognized servable version label: nosuch"),
    ("/predictions/ab/nosuch", "no version label 'nosuch'"),
])
def test_an_unknown_label_or_version_is_a_clear_404(http: httpx.Client, path: str, needle: str) -> None:
    body: Any = {"instances": X.tolist()} if path.startswith("/v1") else X.tolist()
    if path.startswith("/v2"):
        body = infer_body(path.split("/")[3])
    r = http.post(path, json=body)
    assert r.status_code == 404, r.text
    assert needle in r.text


def test_an_unknown_label_is_not_found_over_grpc(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_address) as client, pytest.raises(InferenceServerException) as err:
        client.infer("ab", [infer_input(grpcclient, "x", X)], model_version="nosuch")
    assert err.value.status() == "StatusCode.NOT_FOUND" and "no version label 'nosuch'" in str(err.value)


# ----- the management API is the management key's -----
def test_rollout_control_needs_the_management_key(http: httpx.Client, server: ServerProcess) -> None:
    assert http.get("/v2/models/ab/rollout").status_code == 401
    assert http.post("/v2/models/ab/rollout/abort").status_code == 401
    assert http.get("/v2/models/ab/rollout", headers=AUTH).status_code == 200
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = rpb_grpc.RolloutServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.Status(rpb.RolloutRequest(model="ab"), timeout=30)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        reply = stub.Status(rpb.RolloutRequest(model="ab"), metadata=[("authorization", f"Bearer {KEY}")], timeout=30)
    assert json.loads(reply.status_json)["default_version"] == 1


# ----- rollouts -----
def _cli(server: ServerProcess, *args: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "servelab.cli", "rollout", *args, "--url", server.http_url, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SERVELAB_MANAGEMENT_KEY": KEY})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _finished(status: dict[str, Any]) -> bool:
    return status["rollout"]["status"] not in ("running", "paused")


def test_a_good_candidate_is_promoted_through_every_step(http: httpx.Client, server: ServerProcess) -> None:
    started = _cli(server, "start", "ab", "--candidate", "2", "--shadow", "--min-dwell-s", "0.3",
                   "--min-requests", "20", "--agreement-sample", "1", "--min-samples", "10",
                   "--p99-max-increase", "1", "--p99-slack-ms", "25")
    assert started["rollout"]["steps"] == [0.0, 5.0, 20.0, 100.0] and started["rollout"]["shadow_step"]
    status = drive(http, "ab", _finished)
    assert status["rollout"]["status"] == "promoted", status["rollout"]
    events = [(h["event"], h.get("percent")) for h in status["history"] if h["event"] != "resumed"]
    assert events[-5:] == [("start", None), ("advance", 5.0), ("advance", 20.0), ("advance", 100.0), ("promote", None)]
    assert all(g["passed"] for g in status["rollout"]["gates"])
    assert status["labels"]["stable"] == 2 and status["default_version"] == 2
    assert {_version(http, "ab") for _ in range(10)} == {"2"}
    shown = subprocess.run([sys.executable, "-m", "servelab.cli", "rollout", "status", "ab", "--url", server.http_url,
                            "--key", KEY], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "promoted" in shown.stdout and "max_abs_diff" in shown.stdout, shown.stdout


def test_a_candidate_with_wrong_outputs_is_rolled_back_with_the_reason(http: httpx.Client) -> None:
    stable = rollout(http, "ab")["default_version"]
    spec = {"candidate": "3", "min_dwell_s": 3600, "agreement_sample": 1.0, "steps": [50, 100]}
    assert rollout(http, "ab", body=spec)["rollout"]["stable"] == stable
    status = drive(http, "ab", _finished, batch=10)
    assert status["rollout"]["status"] == "rolled_back"
    assert "gate max_abs_diff failed: outputs differ by up to" in status["rollout"]["reason"]
    assert status["history"][-1]["event"] == "rolled_back" and "max_abs_diff" in status["history"][-1]["reason"]
    assert {_version(http, "ab") for _ in range(20)} == {str(stable)}  # all traffic back on stable at once


def test_a_slower_candidate_is_rolled_back_over_grpc_with_the_reason(http: httpx.Client, server: ServerProcess) -> None:
    spec = {"candidate": "2", "steps": [50, 100], "min_dwell_s": 3600, "agreement_sample": 0,
            "gates": {"min_samples": 10, "p99_slack_ms": 10}}
    metadata = [("authorization", f"Bearer {KEY}")]
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = rpb_grpc.RolloutServiceStub(channel)
        reply = stub.Start(rpb.RolloutRequest(model="slowpy", spec_json=json.dumps(spec)), metadata=metadata, timeout=60)
        assert json.loads(reply.status_json)["rollout"]["percent"] == 50.0
        drive(http, "slowpy", _finished, batch=10)
        status = json.loads(stub.Status(rpb.RolloutRequest(model="slowpy"), metadata=metadata, timeout=60).status_json)
    assert status["rollout"]["status"] == "rolled_back", status["rollout"]
    assert "gate p99_ms failed: candidate P99" in status["rollout"]["reason"]
    assert {_version(http, "slowpy") for _ in range(10)} == {"1"}


def test_a_restart_mid_rollout_resumes_at_the_same_step(repo: Path, tmp_path: Path) -> None:
    db = tmp_path / "routing.sqlite"
    args = ("--management-key", KEY, "--routing-state", str(db))
    with running_server(repo, tmp_path, "before", *args, env=ENV) as first, \
            httpx.Client(base_url=first.http_url, timeout=30) as client:
        rollout(client, "ab", body={"candidate": "2", "auto": False, "agreement_sample": 0,
                                    "gates": {"p99_slack_ms": 1000}})
        status = rollout(client, "ab", "promote")["rollout"]  # by hand: 5% -> 20%
        assert (status["step"], status["percent"]) == (1, 20.0)
    with running_server(repo, tmp_path, "after", *args, env=ENV) as second, \
            httpx.Client(base_url=second.http_url, timeout=30) as client:
        status = rollout(client, "ab")
        assert (status["rollout"]["step"], status["rollout"]["percent"], status["rollout"]["status"]) == (1, 20.0, "running")
        assert [h["event"] for h in status["history"]] == ["start", "advance", "resumed"]
        n = 400
        on_candidate = sum(_version(client, "ab") == "2" for _ in range(n))
        assert _within(on_candidate, n, 0.2), on_candidate  # 20% as before the restart: never 100%
        assert rollout(client, "ab", "abort")["rollout"]["status"] == "aborted"


def test_the_readme_walk_through_shadow_canary_promote_by_hand(http: httpx.Client, server: ServerProcess) -> None:
    """README's release with the CLI: shadow, then each step by `promote`, then stable (few requests, so that
    no gate has its samples and the steps are the operator's alone)."""
    stable = rollout(http, "ab")["default_version"]
    candidate = "1" if stable == 2 else "2"  # versions 1 and 2 answer alike
    status = _cli(server, "start", "ab", "--candidate", candidate, "--shadow", "--manual", "--min-dwell-s", "600",
                  "--min-requests", "1000")
    assert (status["rollout"]["percent"], status["rollout"]["shadow_step"]) == (0.0, True)
    for percent in (5.0, 20.0, 100.0):
        assert {_version(http, "ab") for _ in range(3)} <= {str(stable), candidate}
        status = _cli(server, "promote", "ab")
        assert status["rollout"]["percent"] == percent and status["rollout"]["status"] == "running"
    status = _cli(server, "promote", "ab")
    assert status["rollout"]["status"] == "promoted" and status["default_version"] == int(candidate)
    assert [h["event"] for h in status["history"]][-5:] == ["start", "advance", "advance", "advance", "promote"]
    assert all(h.get("reason") == "by the operator" for h in status["history"][-4:])
