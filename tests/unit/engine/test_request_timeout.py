"""The servers' per-request time limit (DataPlane.request_timeout_s): a late model answers 503, then recovers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from servelab import Engine
from servelab.errors import Unavailable
from servelab.types import InferRequest, Tensor

SLEEPY = """
import time
import numpy as np


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = r.inputs["INPUT"]
            time.sleep(float(x[0]))
            out.append({"OUTPUT": x})
        return out
"""
CONFIG = """name: "sleepy"
backend: "python"
max_batch_size: 0
input { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] }
output { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] }
"""


def _request(seconds: float) -> InferRequest:
    return InferRequest("sleepy", [Tensor.from_numpy("INPUT", np.array([seconds], np.float32))])


def test_a_late_model_answers_unavailable_and_the_next_request_succeeds(tmp_path: Path) -> None:
    (tmp_path / "sleepy" / "1").mkdir(parents=True)
    (tmp_path / "sleepy" / "1" / "model.py").write_text(SLEEPY)
    (tmp_path / "sleepy" / "config.pbtxt").write_text(CONFIG)
    with Engine(tmp_path) as engine:
        dataplane = engine.dataplane
        dataplane.request_timeout_s = 0.2

        async def run() -> None:
            with pytest.raises(Unavailable, match=r"model 'sleepy' did not answer within 0.2 s"):
                await dataplane.infer_async(_request(0.6))
            await asyncio.sleep(0.6)  # the late execution finishes in its worker
            response = await dataplane.infer_async(_request(0.0))
            assert float(response.outputs[0].data[0]) == 0.0

        asyncio.run(run())
        stats = engine.get_inference_statistics("sleepy")["model_stats"][0]["inference_stats"]
    assert stats["fail"]["count"] == 1 and stats["success"]["count"] == 1
