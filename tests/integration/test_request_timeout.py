"""The servers' per-request time limit (DataPlane.request_timeout_s): a late model answers 503, then
recovers. The late execution is held inside the ``gated`` model (it runs in a Python-backend worker
process) until the timeout has been answered, so no duration is guessed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from harness.gates import SocketGate
from harness.repository import add_gated_model
from servelab import Engine
from servelab.errors import Unavailable
from servelab.types import InferRequest, Tensor


def _request(value: float) -> InferRequest:
    return InferRequest("gated", [Tensor.from_numpy("INPUT", np.array([[value]], np.float32))])


def test_a_late_model_answers_unavailable_and_the_next_request_succeeds(tmp_path: Path, gate: SocketGate) -> None:
    add_gated_model(tmp_path, gate.port)
    with Engine(tmp_path) as engine:
        dataplane = engine.dataplane

        async def run() -> None:
            dataplane.request_timeout_s = 0.2
            late = asyncio.create_task(dataplane.infer_async(_request(1.0)))
            with await asyncio.to_thread(gate.wait_entered) as held:  # the model is executing
                with pytest.raises(Unavailable, match=r"model 'gated' did not answer within 0.2 s"):
                    await late
                held.release()
                await asyncio.to_thread(held.wait_finished)  # the late execution ends in its worker
            dataplane.request_timeout_s = 60.0  # the recovery is about the worker, not the clock
            answer = asyncio.create_task(dataplane.infer_async(_request(2.0)))
            with await asyncio.to_thread(gate.wait_entered) as held:
                held.release()
            response = await answer
            assert float(response.outputs[0].data[0, 0]) == 2.0

        asyncio.run(run())
        stats = engine.get_inference_statistics("gated")["model_stats"][0]["inference_stats"]
    assert stats["fail"]["count"] == 1 and stats["success"]["count"] == 1
