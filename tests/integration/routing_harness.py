"""What the routing tests share: their repository (models in several versions, policy files), the
management key, and traffic that drives a rollout until it decides.

- ``ab``: FP32 [4] ``y = x * k`` (onnxruntime, x/y) in versions 1 and 2 (k = 2: the same answers) and 3
  (k = 2.5: wrong answers); ``routing.yaml`` pins the default to ``stable`` = 1, sticky by ``x-user-id``.
- ``split``: the same model, versions 1 (k = 1) and 2 (k = 2), split 80/20 by a policy, sticky by the
  ``user`` parameter or the ``x-user-id`` header.
- ``slowpy``: a python INPUT -> OUTPUT echo; version 2 answers the same 50 ms later (a slower candidate).
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from harness.models import echo_py, write_python_model
from harness.repository import python_model, scale_model

__all__ = ["KEY", "X", "build_routing_repository", "drive", "infer_body", "rollout"]

KEY = "mgmt-" + "r" * 27
AUTH = {"Authorization": f"Bearer {KEY}"}
X = np.arange(4, dtype=np.float32).reshape(1, 4) + 1
ALL_VERSIONS = "version_policy: { all: {} }\n"
SLOW_ECHO = """\
import time


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.05)  # the degradation under test: the same answers, 50 ms later
        return [{"OUTPUT": r.inputs["INPUT"]} for r in requests]
"""


def build_routing_repository(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    scale_model(root, "ab", {1: 2.0, 2: 2.0, 3: 2.5}, ALL_VERSIONS)
    (root / "ab" / "routing.yaml").write_text("default: stable\nlabels: {stable: 1}\nsticky: {header: x-user-id}\n")
    scale_model(root, "split", {1: 1.0, 2: 2.0}, ALL_VERSIONS)
    (root / "split" / "routing.yaml").write_text(textwrap.dedent("""\
        sticky: {parameter: user, header: x-user-id}
        split:
          - {version: 1, weight: 80}
          - {version: 2, weight: 20}
    """))
    python_model(root, "slowpy", echo_py(), "FP32", [-1], extra=ALL_VERSIONS)
    write_python_model(root / "slowpy", SLOW_ECHO, version=2)
    return root


def infer_body(model: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    name = "INPUT" if model == "slowpy" else "x"
    body: dict[str, Any] = {"inputs": [{"name": name, "shape": [1, 4], "datatype": "FP32", "data": X.ravel().tolist()}]}
    if parameters:
        body["parameters"] = parameters
    return body


def rollout(http: httpx.Client, model: str, action: str = "", body: dict[str, Any] | None = None) -> dict[str, Any]:
    """The status document after ``action`` ("" with a body: start; "" without: status)."""
    path = f"/v2/models/{model}/rollout" + (f"/{action}" if action else "")
    r = http.post(path, json=body, headers=AUTH) if action or body is not None else http.get(path, headers=AUTH)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def drive(http: httpx.Client, model: str, done: Callable[[dict[str, Any]], bool], timeout_s: float = 180.0,
          batch: int = 25) -> dict[str, Any]:
    """Send requests ``batch`` at a time, reading the rollout's status after each batch, until ``done(status)``;
    the rollout decides on its own evaluator (the traffic is what it measures). Returns the final status."""
    deadline = time.monotonic() + timeout_s
    while True:
        for _ in range(batch):
            r = http.post(f"/v2/models/{model}/infer", json=infer_body(model))
            assert r.status_code == 200, r.text
        status = rollout(http, model)
        if done(status):
            return status
        assert time.monotonic() < deadline, f"the rollout did not decide within {timeout_s} s: {status['rollout']}"
