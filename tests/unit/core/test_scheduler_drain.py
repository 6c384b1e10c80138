"""A reload's drain waits for requests still queued in DirectScheduler's pool (regression: soak.py).

Found by benchmarks/soak.py: a request waiting for the worker thread was not counted in flight, so a
reload closed the old version's pool under it and the client got a 500 ("cannot schedule new futures
after shutdown") or a cancelled request. Now in flight counts from submission, and a request that
reaches a closed version is Unavailable (503), never another error.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest

from servelab.backends.base import Backend, BackendContext, Inputs, Outputs
from servelab.core.scheduling import DirectScheduler
from servelab.core.stats import ModelStats
from servelab.errors import Unavailable
from servelab.protocol import model_config_pb2 as mc

RUN_S = 0.05


class _Slow(Backend):
    kind = "slow"

    def load(self) -> None:
        self.calls = 0

    def infer(self, inputs: Inputs) -> Outputs:
        self.calls += 1
        time.sleep(RUN_S)
        return {"y": inputs["x"]}


def _scheduler(tmp_path: Path) -> DirectScheduler:
    config = mc.ModelConfig(name="m", max_batch_size=0)
    config.parameters["inline_execution_us"].string_value = "0"  # always the pool
    config.parameters["idle_inline_execution_us"].string_value = "0"
    backend = _Slow(BackendContext("m", 1, tmp_path, config))
    backend.load()
    return DirectScheduler([backend], ModelStats("m", 1), threads=1)


def test_drain_waits_for_requests_queued_in_the_pool(tmp_path: Path) -> None:
    scheduler = _scheduler(tmp_path)
    x = np.ones(2, np.float32)

    async def run() -> list[object]:
        requests = [asyncio.create_task(scheduler.run_async({"x": x})) for _ in range(5)]
        await asyncio.sleep(0)  # every request is submitted (the pool has one thread: four wait)
        assert scheduler.in_flight == 5

        def reload() -> bool:
            drained = scheduler.drain(30)
            scheduler.close()
            return drained

        drained = await asyncio.to_thread(reload)
        assert drained
        return await asyncio.gather(*requests, return_exceptions=True)

    results = asyncio.run(run())
    assert all(isinstance(r, dict) for r in results), results
    assert scheduler.in_flight == 0


def test_a_request_reaching_a_closed_version_is_unavailable(tmp_path: Path) -> None:
    scheduler = _scheduler(tmp_path)
    scheduler.close()
    with pytest.raises(Unavailable, match="was unloaded; retry"):
        asyncio.run(scheduler.run_async({"x": np.ones(2, np.float32)}))
    assert scheduler.in_flight == 0


def test_requests_dropped_past_the_drain_timeout_are_unavailable(tmp_path: Path) -> None:
    scheduler = _scheduler(tmp_path)
    x = np.ones(2, np.float32)

    async def run() -> list[object]:
        requests = [asyncio.create_task(scheduler.run_async({"x": x})) for _ in range(3)]
        await asyncio.sleep(0)

        def impatient_reload() -> None:
            scheduler.drain(0)  # gives up at once: the queued ones are cancelled by close
            scheduler.close()

        await asyncio.to_thread(impatient_reload)
        return await asyncio.gather(*requests, return_exceptions=True)

    results = asyncio.run(run())
    assert all(isinstance(r, dict | Unavailable) for r in results), results
    assert any(isinstance(r, Unavailable) for r in results)
