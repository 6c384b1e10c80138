"""A python model whose author declares ``execute_never_blocks`` may run on the event loop (issue #14: python
models that declare themselves thread-safe and non-blocking may run in-process); without the declaration,
with an ``async def execute`` or a bad value, it never does."""

from __future__ import annotations

import asyncio
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from harness.backends import context
from harness.models import write_python_model
from servelab.backends.parameters import PythonParameters
from servelab.backends.python import PythonBackend
from servelab.core.scheduling import DirectScheduler
from servelab.core.stats import ModelStats
from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc

#: answers x with x and records the thread each call ran in
RECORDER = """
import threading

class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    {kind}def execute(self, requests):
        self.threads.append(threading.current_thread().name)
        return [{{"y": r.get("x")}} for r in requests]
"""


def _backend(tmp_path: Path, *, declared: str | None, coroutine: bool = False) -> PythonBackend:
    source = RECORDER.format(kind="async " if coroutine else "")
    version_dir = write_python_model(tmp_path / "rec", textwrap.dedent(source)).parent
    config = mc.ModelConfig(name="rec", backend="python", max_batch_size=0)
    config.input.add(name="x", data_type=mc.TYPE_FP32, dims=[1])
    config.output.add(name="y", data_type=mc.TYPE_FP32, dims=[1])
    config.parameters["instance_mode"].string_value = "thread"
    if declared is not None:
        config.parameters["execute_never_blocks"].string_value = declared
    backend = PythonBackend(context(config, version_dir, name="rec"))
    backend.load()
    return backend


def _threads_and_loop(backend: PythonBackend, requests: int = 80) -> tuple[DirectScheduler, str]:
    """The scheduler after ``requests`` requests one by one, and the name of the loop's thread."""
    scheduler = DirectScheduler([backend], ModelStats("rec", 1))
    assert not scheduler.runs_inline_now  # unmeasured: never inline
    x = {"x": np.zeros(1, np.float32)}

    async def drive() -> str:
        for _ in range(requests):
            assert (await scheduler.run_async(x))["y"].tolist() == [0.0]
        return threading.current_thread().name

    try:
        loop_thread = asyncio.run(drive())
    finally:
        scheduler.close()
        backend.unload()
    return scheduler, loop_thread


def test_a_declared_model_moves_onto_the_loop_once_measured_fast(tmp_path: Path) -> None:
    backend = _backend(tmp_path, declared="true")
    assert backend.never_blocks
    model = backend.model
    scheduler, loop_thread = _threads_and_loop(backend)
    assert model.threads[0] != loop_thread  # unmeasured: the worker thread first
    assert model.threads[-1] == loop_thread  # measured fast: inline, no thread hop
    assert scheduler.runs_inline_now  # what lets the data plane skip the per-request timeout


@pytest.mark.parametrize("declared", [None, "0", "false"])
def test_an_undeclared_model_never_runs_on_the_loop(tmp_path: Path, declared: str | None) -> None:
    backend = _backend(tmp_path, declared=declared)
    assert not backend.never_blocks
    model = backend.model
    scheduler, loop_thread = _threads_and_loop(backend)
    assert model.threads and loop_thread not in model.threads
    assert not scheduler.runs_inline_now


def test_an_async_execute_is_never_taken_as_non_blocking(tmp_path: Path) -> None:
    backend = _backend(tmp_path, declared="1", coroutine=True)
    assert not backend.never_blocks
    backend.unload()


def test_a_bad_declaration_fails_the_load_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="'execute_never_blocks' must be 0 or 1.*'maybe'"):
        _backend(tmp_path, declared="maybe")


def test_the_parameter_reads_back_what_it_writes() -> None:
    config = mc.ModelConfig(name="rec", backend="python")
    PythonParameters(never_blocks=True).write(config)
    assert config.parameters["execute_never_blocks"].string_value == "1"
    assert PythonParameters.read(config).never_blocks
