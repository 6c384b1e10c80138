"""Python models in real worker processes, through Triton's API: decoupled streams (responses after
execute returns, worker death, cancellation), BLS calls and stream calls into the server, custom metrics."""

from __future__ import annotations

import os
import signal
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from workers_testutil import start_worker

from harness.models import write_python_model
from servelab.backends.base import Inputs, Outputs, StreamItem, StreamRequest
from servelab.backends.python import PythonBackend
from servelab.core.workers import ThreadSink, WorkerInstance
from servelab.errors import NotFound, Unavailable
from servelab.metrics import CustomMetrics
from servelab.protocol import model_config_pb2 as mc

WAIT_S = 60.0

DECOUPLED = """
name: "rep" backend: "python" model_transaction_policy { decoupled: true }
input [{ name: "IN" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [1] }]
"""

#: IN = n > 0: one response now, n - 1 more once a request with IN = 0 has come (from a thread that
#: outlives execute); IN = -1: a thread that stops only when its client cancels, then reports so.
REPEAT = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils

def out(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], np.int32))])

class TritonPythonModel:
    def initialize(self, args):
        self.go = threading.Event()
        self.saw_cancel = threading.Event()

    def execute(self, requests):
        for r in requests:
            n = int(r.get("IN")[0])
            sender = r.get_response_sender()
            if n == 0:
                self.go.set()
                sender.send(out(int(self.saw_cancel.is_set())), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            elif n == -1:
                threading.Thread(target=self.until_cancelled, args=(sender,), daemon=True).start()
            else:
                sender.send(out(0))
                threading.Thread(target=self.rest, args=(sender, n), daemon=True).start()

    def rest(self, sender, n):
        self.go.wait(60)
        for i in range(1, n):
            sender.send(out(i))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def until_cancelled(self, sender):
        sender.send(out(-1))
        while not sender.is_cancelled():
            self.saw_cancel.wait(0.01)
        self.saw_cancel.set()
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""


def _python_worker(tmp_path: Path, source: str, config_text: str, infer: Any = None, **context: Any) -> WorkerInstance:
    config = text_format.Parse(config_text, mc.ModelConfig())
    version_dir = write_python_model(tmp_path / config.name, textwrap.dedent(source)).parent
    return start_worker(PythonBackend, cfg=config, version_dir=version_dir, infer=infer, context=context)


def _stream(worker: WorkerInstance, n: int) -> ThreadSink:
    sink = ThreadSink()
    worker.open_stream(StreamRequest({"IN": np.array([n], np.int32)}), sink)
    return sink


def _take(sink: ThreadSink) -> StreamItem:
    item = sink.get(WAIT_S)
    assert item is not None, "no response within the wait"
    return item


def _value(item: StreamItem) -> int | None:
    return None if item.outputs is None else int(item.outputs["OUT"][0])


def test_responses_keep_coming_after_execute_returned_while_the_worker_serves_others(tmp_path: Path) -> None:
    worker = _python_worker(tmp_path, REPEAT, DECOUPLED)
    try:
        first = _stream(worker, 3)
        assert _value(_take(first)) == 0  # its execute has returned; the rest waits for the next request
        second = _stream(worker, 0)
        item = _take(second)
        assert item.final and _value(item) == 0
        rest = [_take(first) for _ in range(3)]
        assert [(_value(i), i.final) for i in rest] == [(1, False), (2, False), (None, True)]
        assert first.finished and first.executed is not None  # its execution's timing came with RESULT
    finally:
        worker.close()


def test_a_dying_worker_ends_its_open_streams_with_the_reason(tmp_path: Path) -> None:
    worker = _python_worker(tmp_path, REPEAT, DECOUPLED)
    try:
        held = _stream(worker, 2)
        assert _value(_take(held)) == 0
        assert worker.pid is not None
        os.kill(worker.pid, signal.SIGKILL)
        item = _take(held)
        assert item.final and isinstance(item.error, Unavailable)
        assert "was killed by signal 9" in item.error.message  # ... while running it, or while it streamed
    finally:
        worker.close()


def test_a_client_that_goes_away_is_seen_by_the_models_sender(tmp_path: Path) -> None:
    worker = _python_worker(tmp_path, REPEAT, DECOUPLED)
    try:
        gone = _stream(worker, -1)
        assert _value(_take(gone)) == -1
        gone.cancel()
        assert worker.wait_available(WAIT_S)
        probe = _stream(worker, 0)
        for _ in range(int(WAIT_S / 0.05)):  # the model's thread notices the cancel on its own time
            item = _take(probe)
            if _value(item) == 1:
                break
            probe = _stream(worker, 0)
        assert _value(item) == 1 and gone.get(0.0) is None  # nothing after the cancel reached the consumer
    finally:
        worker.close()


CALLER = """
name: "caller" backend: "python"
input [{ name: "X" data_type: TYPE_FP32 dims: [-1] }]
output [{ name: "SUM" data_type: TYPE_FP32 dims: [-1] }, { name: "COUNT" data_type: TYPE_INT32 dims: [1] }]
"""

#: adds what model "double" answers to what every response of model "parts" holds, counts the responses
CALLING = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X")
            doubled = pb_utils.InferenceRequest(model_name="double", inputs=[x], requested_output_names=["Y"]).exec()
            if doubled.has_error():
                raise pb_utils.TritonModelException(doubled.error().message())
            call = pb_utils.InferenceRequest(model_name="parts", inputs=[x], requested_output_names=["Y"],
                                             parameters={"k": 3})
            parts = [p for p in call.exec(decoupled=True) if p.output_tensors()]
            total = pb_utils.get_output_tensor_by_name(doubled, "Y").as_numpy().copy()
            total += sum(pb_utils.get_output_tensor_by_name(p, "Y").as_numpy() for p in parts)
            count = len(parts)
            missing = pb_utils.InferenceRequest(model_name="missing", inputs=[x], requested_output_names=["Y"]).exec()
            assert missing.has_error() and missing.error().code() == pb_utils.TritonError.NOT_FOUND
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total),
                                                         pb_utils.Tensor("COUNT", np.array([count], np.int32))]))
        return responses
"""


def test_bls_calls_and_stream_calls_go_through_the_server(tmp_path: Path) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def infer(name: str, version: str, inputs: Inputs) -> Outputs:
        if name != "double":
            raise NotFound(f"unknown model '{name}'")
        return {"Y": inputs["X"] * 2, "EXTRA": np.zeros(1)}

    def stream(name: str, version: str, inputs: Inputs, parameters: dict[str, Any]) -> Any:
        seen.append((name, parameters))
        for i in range(parameters["k"]):
            yield StreamItem({"Y": inputs["X"] + i})
        yield StreamItem(final=True)

    worker = _python_worker(tmp_path, CALLING, CALLER, infer, infer_stream=stream)
    try:
        for _ in range(20):  # answers' shared memory is freed as the worker reads them
            out = worker.infer({"X": np.arange(1000, dtype=np.float32)})
        x = np.arange(1000, dtype=np.float32)
        np.testing.assert_allclose(out["SUM"], x * 2 + 3 * x + 3)
        assert int(out["COUNT"][0]) == 3 and seen[0] == ("parts", {"k": 3})
        channel = worker._d.channel
        assert channel is not None and channel.writer.blocks <= 4
    finally:
        worker.close()


METRICS = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        family = pb_utils.MetricFamily("unit_worker_requests", "requests seen", pb_utils.MetricFamily.COUNTER)
        self.requests = family.Metric(labels={"model": args["model_name"]})
        try:
            pb_utils.MetricFamily("unit_worker_requests", "requests seen", pb_utils.MetricFamily.GAUGE)
        except pb_utils.TritonModelException as exc:
            self.refusal = str(exc)

    def execute(self, requests):
        self.requests.increment(len(requests))
        value = pb_utils.Tensor("OUT", np.array([self.requests.value()], np.float32))
        refusal = pb_utils.Tensor("WHY", np.array([self.refusal], dtype=object))
        return [pb_utils.InferenceResponse([value, refusal]) for _ in requests]
"""


METERED = ('name: "counted" backend: "python" input [{ name: "IN" data_type: TYPE_INT32 dims: [1] }] '
           'output [{ name: "OUT" data_type: TYPE_FP32 dims: [1] }, { name: "WHY" data_type: TYPE_STRING dims: [1] }]')


@pytest.mark.parametrize("where", ["worker", "thread"])
def test_custom_metrics_live_in_the_server_and_go_with_the_instance(tmp_path: Path, where: str) -> None:
    store = CustomMetrics()
    if where == "worker":
        worker: Any = _python_worker(tmp_path, "import numpy as np\n" + METRICS, METERED, custom_metrics=store)
    else:
        from harness.backends import context

        version_dir = write_python_model(tmp_path / "counted", "import numpy as np\n" + textwrap.dedent(METRICS)).parent
        worker = PythonBackend(context(text_format.Parse(METERED, mc.ModelConfig()), version_dir, name="counted",
                                       custom_metrics=store))  # fmt: skip
        worker.load()
    try:
        for expected in (1.0, 2.0):
            out = worker.infer({"IN": np.array([1], np.int32)})
            assert float(out["OUT"][0]) == expected
        assert store.value("unit_worker_requests", (("model", "counted"),)) == 2.0
        assert "already exists as a counter" in str(out["WHY"][0])  # bytes from a worker, str in a thread
    finally:
        worker.unload()
    with pytest.raises(NotFound):
        store.value("unit_worker_requests", (("model", "counted"),))


def test_a_decoupled_model_in_a_server_thread_streams_the_same_way(tmp_path: Path) -> None:
    from harness.backends import context
    from servelab.core.workers import start_stream

    config = text_format.Parse(DECOUPLED, mc.ModelConfig())
    version_dir = write_python_model(tmp_path / "rep", textwrap.dedent(REPEAT)).parent
    backend = PythonBackend(context(config, version_dir, name="rep"))
    backend.load()
    try:
        first, second = ThreadSink(), ThreadSink()
        start_stream([backend], StreamRequest({"IN": np.array([2], np.int32)}, request_id="a"), first)
        assert _value(_take(first)) == 0
        start_stream([backend], StreamRequest({"IN": np.array([0], np.int32)}), second)
        assert _take(second).final
        assert [(_value(i), i.final) for i in (_take(first), _take(first))] == [(1, False), (None, True)]
    finally:
        backend.unload()
