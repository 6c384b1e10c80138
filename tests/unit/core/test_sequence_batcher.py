"""The sequence batcher: slots and backlog, both strategies, control tensors, implicit state, the idle
limit, cancellation and Triton's request errors. The backend records every execution (each request's
inputs as the model received them) and answers OUTPUT = INPUT + INPUT_STATE (state models) or INPUT;
a request whose INPUT is HOLD waits at a ThreadGate until the test opens it (no guessed durations)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ClassVar

import numpy as np
import pytest
from google.protobuf import text_format

from harness.backends import context
from harness.gates import ThreadGate
from servelab.backends.base import Backend, BackendContext, Inputs, Outputs
from servelab.core.batching import SequenceBatcher, make_scheduler
from servelab.core.stats import ModelStats
from servelab.errors import Cancelled, InvalidArgument, ServelabError, Unavailable
from servelab.protocol import model_config_pb2 as mc

HOLD = 999

CONTROLS = """
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
"""
STATE = """
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


class Recorder(Backend):
    """Records each execution's requests; OUTPUT = INPUT (+ INPUT_STATE), OUTPUT_STATE = OUTPUT."""

    kind: ClassVar[str] = "recorder"

    def __init__(self, ctx: BackendContext, gate: ThreadGate | None) -> None:
        super().__init__(ctx)
        self.gate = gate
        self.executions: list[list[Inputs]] = []
        self._lock = threading.Lock()

    def load(self) -> None:
        pass

    def infer(self, inputs: Inputs) -> Outputs:
        raise AssertionError("execute() is overridden")

    def execute(self, requests: list[Inputs]) -> list[Outputs | ServelabError]:
        with self._lock:
            self.executions.append([{k: np.array(v, copy=True) for k, v in r.items()} for r in requests])
        if self.gate is not None and any(int(r["INPUT"].reshape(-1)[0]) == HOLD for r in requests):
            self.gate.hold()
        out: list[Outputs | ServelabError] = []
        for r in requests:
            y = r["INPUT"] + r["INPUT_STATE"] if "INPUT_STATE" in r else r["INPUT"].copy()
            out.append({"OUTPUT": y, "OUTPUT_STATE": y})
        return out


def config(max_batch_size: int = 4, body: str = CONTROLS, extra: str = "", outputs: str = "") -> mc.ModelConfig:
    text = f"""
      name: "m" max_batch_size: {max_batch_size}
      sequence_batching {{ max_sequence_idle_microseconds: 60000000 {body} }}
      input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
      output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} {outputs} ]
      {extra}
    """
    return text_format.Parse(text, mc.ModelConfig())


@pytest.fixture
def made() -> Iterator[list[SequenceBatcher]]:
    """The batchers a test builds, closed after it (their threads end)."""
    batchers: list[SequenceBatcher] = []
    yield batchers
    while batchers:
        batchers.pop().close()


def build(made: list[SequenceBatcher], cfg: mc.ModelConfig, instances: int = 1, gate: ThreadGate | None = None) -> SequenceBatcher:
    backends: list[Backend] = [Recorder(context(cfg), gate) for _ in range(instances)]
    b = make_scheduler(backends, ModelStats("m", 1), cfg)
    assert isinstance(b, SequenceBatcher)
    made.append(b)
    return b


def x(value: int, rows: int = 1) -> dict[str, np.ndarray]:
    return {"INPUT": np.full((rows, 1), value, dtype=np.int32)}


def seq(sid: int | str, start: bool = False, end: bool = False) -> dict[str, Any]:
    return {"sequence_id": sid, "sequence_start": start, "sequence_end": end}


def run(coro: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(coro())  # type: ignore[arg-type]


async def busy(b: SequenceBatcher, gate: ThreadGate, sid: int = 1) -> asyncio.Future[Outputs]:
    """Start sequence ``sid`` with a request that holds the (only) instance at the gate."""
    held = asyncio.ensure_future(b.run_async(x(HOLD), seq(sid, start=True)))
    await gate.entered_async()
    return held


async def queued(b: SequenceBatcher, count: int) -> None:
    """Until ``count`` requests wait in slots or the backlog (each submission is one loop turn away)."""
    while b.pending < count:
        await asyncio.sleep(0)


def executions(b: SequenceBatcher, lane: int = 0) -> list[list[Inputs]]:
    return b.backends[lane].executions  # type: ignore[attr-defined,no-any-return]


def scalar(inputs: Inputs, name: str) -> Any:
    return inputs[name].reshape(-1)[0].item()


def test_controls_carry_start_end_ready_and_the_correlation_id(made: list[SequenceBatcher]) -> None:
    b = build(made, config())

    async def main() -> list[int]:
        outs = [await b.run_async(x(v), seq(42, start=i == 0, end=i == 2)) for i, v in enumerate((5, 6, 7))]
        return [int(o["OUTPUT"][0, 0]) for o in outs]

    assert run(main) == [5, 6, 7]
    rows = [e[0] for e in executions(b)]
    assert [(scalar(r, "START"), scalar(r, "END"), scalar(r, "READY"), scalar(r, "CORRID")) for r in rows] == [
        (1, 0.0, True, 42), (0, 0.0, True, 42), (0, 1.0, True, 42),
    ]  # fmt: skip
    assert rows[0]["START"].dtype == np.int32 and rows[0]["END"].dtype == np.float32
    assert rows[0]["READY"].dtype == np.bool_ and rows[0]["CORRID"].dtype == np.uint64
    assert all(r[n].shape == (1, 1) for r in rows for n in ("START", "END", "READY", "CORRID"))


def test_direct_keeps_each_sequence_in_its_row_with_null_requests_below(made: list[SequenceBatcher]) -> None:
    gate = ThreadGate()
    b = build(made, config(max_batch_size=2), gate=gate)

    async def main() -> None:
        held = await busy(b, gate)  # slot 0
        second = asyncio.ensure_future(b.run_async(x(3), seq(2, start=True)))  # slot 1, waits
        await queued(b, 1)
        gate.open()
        await held
        assert int((await second)["OUTPUT"][0, 0]) == 3

    run(main)
    batch = executions(b)[1]
    assert len(batch) == 2  # slot 0 had nothing ready: a null request keeps sequence 2 in row 1
    null, real = batch
    assert (scalar(null, "READY"), scalar(null, "START"), scalar(null, "CORRID"), scalar(null, "INPUT")) == (False, 0, 0, 0)
    assert (scalar(real, "READY"), scalar(real, "START"), scalar(real, "CORRID"), scalar(real, "INPUT")) == (True, 1, 2, 3)
    assert b.stats.as_dict()["inference_count"] == 2  # null requests are not counted


def test_a_sequence_without_a_free_slot_waits_in_the_backlog_then_runs_in_order(made: list[SequenceBatcher]) -> None:
    gate = ThreadGate()
    b = build(made, config(max_batch_size=1), gate=gate)  # one slot only

    async def main() -> list[int]:
        first = await busy(b, gate)
        later = [asyncio.ensure_future(b.run_async(x(v), seq(2, start=v == 10, end=v == 30))) for v in (10, 20, 30)]
        end_1 = asyncio.ensure_future(b.run_async(x(1), seq(1, end=True)))
        await queued(b, 4)
        gate.open()
        await first
        await end_1
        return [int((await t)["OUTPUT"][0, 0]) for t in later]

    assert run(main) == [10, 20, 30]
    corrids = [scalar(e[0], "CORRID") for e in executions(b)]
    assert corrids == [1, 1, 2, 2, 2]  # sequence 2 got the slot only when sequence 1 ended


def test_oldest_batches_heads_of_different_sequences_oldest_first(made: list[SequenceBatcher]) -> None:
    gate = ThreadGate()
    cfg = config(max_batch_size=4, body=CONTROLS + "oldest { max_candidate_sequences: 8 }")
    b = build(made, cfg, gate=gate)

    async def main() -> None:
        held = await busy(b, gate, 100)
        tasks = [asyncio.ensure_future(b.run_async(x(s), seq(s, start=True))) for s in (1, 2)]
        tasks.append(asyncio.ensure_future(b.run_async(x(11), seq(1))))  # sequence 1's second request
        tasks += [asyncio.ensure_future(b.run_async(x(s), seq(s, start=True))) for s in (3, 4, 5)]
        await queued(b, 6)
        gate.open()
        await asyncio.gather(held, *tasks)

    run(main)
    formed = [[scalar(r, "CORRID") for r in e] for e in executions(b)]
    assert formed[0] == [100]
    assert formed[1] == [1, 2, 3, 4]  # one request per sequence, oldest first, up to max_batch_size
    assert sorted(formed[2]) == [1, 5]  # then sequence 1's second request, beside sequence 5


def test_implicit_state_flows_to_the_next_request_and_restarts_on_start(made: list[SequenceBatcher]) -> None:
    b = build(made, config(body=STATE))

    async def main() -> list[int]:
        outs = []
        for v, start in ((4, True), (6, False), (1, False), (10, True), (5, False)):
            outs.append(await b.run_async(x(v), seq(9, start=start)))
        assert all("OUTPUT_STATE" not in o for o in outs)  # not listed under output: the client never sees it
        return [int(o["OUTPUT"][0, 0]) for o in outs]

    assert run(main) == [4, 10, 11, 10, 15]
    first = executions(b)[0][0]
    assert first["INPUT_STATE"].tolist() == [[0]]  # START: the initial (zero) state


def test_a_state_output_listed_under_output_reaches_the_client(made: list[SequenceBatcher]) -> None:
    cfg = config(body=STATE, outputs=', { name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] }')
    b = build(made, cfg)

    async def main() -> dict[str, np.ndarray]:
        await b.run_async(x(2), seq(1, start=True))
        return await b.run_async(x(3), seq(1))

    assert run(main)["OUTPUT_STATE"].tolist() == [[5]]


def test_initial_state_from_a_file(made: list[SequenceBatcher], tmp_path: Any) -> None:
    body = """state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ]
                        initial_state { name: "hundred" data_type: TYPE_INT32 dims: [ 1 ] data_file: "h.bin" } } ]"""
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "h.bin").write_bytes(np.int32(100).tobytes())
    cfg = config(body=body)
    b = SequenceBatcher([Recorder(context(cfg), None)], ModelStats("m", 1), cfg, model_dir=tmp_path)
    made.append(b)
    assert int(run(lambda: b.run_async(x(1), seq(3, start=True)))["OUTPUT"][0, 0]) == 101


def test_string_ids_and_a_string_corrid(made: list[SequenceBatcher]) -> None:
    body = 'control_input [ { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] } ]'
    b = build(made, config(body=body))
    run(lambda: b.run_async(x(1), seq("e333c95a", start=True, end=True)))
    assert executions(b)[0][0]["CORRID"].tolist() == [[b"e333c95a"]]


def test_a_numeric_corrid_takes_a_numeric_string_id_and_refuses_others(made: list[SequenceBatcher]) -> None:
    b = build(made, config())
    run(lambda: b.run_async(x(1), seq("1002", start=True, end=True)))
    assert scalar(executions(b)[0][0], "CORRID") == 1002
    with pytest.raises(InvalidArgument, match="sequence_id 'abc' is not a number.*TYPE_STRING"):
        run(lambda: b.run_async(x(1), seq("abc", start=True)))


@pytest.mark.parametrize(
    ("parameters", "rows", "message"),
    [
        ({}, 1, "must specify a non-zero or non-empty correlation ID"),
        ({"sequence_id": 0, "sequence_start": True}, 1, "must specify a non-zero or non-empty correlation ID"),
        ({"sequence_id": ""}, 1, "must specify a non-zero or non-empty correlation ID"),
        ({"sequence_id": 7}, 1, "for sequence 7 to model 'm' must specify the START flag on the first request"),
        ({"sequence_id": 7, "sequence_start": True}, 2, "must specify batch-size 1 due to requirements of sequence batcher"),
        ({"sequence_id": 7, "sequence_start": "true"}, 1, "'sequence_start' must be true or false, got 'true'"),
        ({"sequence_id": 1.5, "sequence_start": True}, 1, "'sequence_id' must be an unsigned integer or a string"),
        ({"sequence_id": -1, "sequence_start": True}, 1, r"'sequence_id' must lie in 0..2\*\*64-1"),
    ],
)
def test_triton_request_errors(made: list[SequenceBatcher], parameters: dict[str, Any], rows: int, message: str) -> None:
    b = build(made, config())
    with pytest.raises(InvalidArgument, match=message):
        run(lambda: b.run_async(x(1, rows), parameters))
    assert b.in_flight == 0 and b.pending == 0


def test_after_end_the_id_must_start_again(made: list[SequenceBatcher]) -> None:
    b = build(made, config())

    async def main() -> None:
        await b.run_async(x(1), seq(5, start=True, end=True))
        with pytest.raises(InvalidArgument, match="must specify the START flag"):
            await b.run_async(x(1), seq(5))

    run(main)


def test_an_idle_sequence_loses_its_slot_to_the_backlog(made: list[SequenceBatcher]) -> None:
    cfg = config(max_batch_size=1)
    cfg.sequence_batching.max_sequence_idle_microseconds = 200_000  # 0.2 s
    b = build(made, cfg)

    async def main() -> None:
        await b.run_async(x(1), seq(1, start=True))  # holds the only slot, then goes quiet
        t0 = time.monotonic()
        waiting = await asyncio.wait_for(b.run_async(x(2), seq(2, start=True)), timeout=60)  # backlog until then
        assert int(waiting["OUTPUT"][0, 0]) == 2 and time.monotonic() - t0 >= 0.15
        with pytest.raises(InvalidArgument, match="for sequence 1 .* must specify the START flag"):
            await b.run_async(x(3), seq(1))

    run(main)


def test_cancelling_a_queued_request_cancels_its_sequence(made: list[SequenceBatcher]) -> None:
    gate = ThreadGate()
    b = build(made, config(max_batch_size=1), gate=gate)

    async def main() -> None:
        held = await busy(b, gate)
        doomed = asyncio.ensure_future(b.run_async(x(2), seq(1)))
        follower = asyncio.ensure_future(b.run_async(x(3), seq(1)))
        await queued(b, 2)
        doomed.cancel()
        with pytest.raises(Cancelled, match="sequence 1 of model 'm' was cancelled"):
            await follower
        gate.open()
        await held
        with pytest.raises(InvalidArgument, match="must specify the START flag"):
            await b.run_async(x(4), seq(1))

    run(main)
    assert b.in_flight == 0


def test_close_fails_queued_requests_and_refuses_new_ones(made: list[SequenceBatcher]) -> None:
    gate = ThreadGate()
    b = build(made, config(max_batch_size=1), gate=gate)

    async def main() -> None:
        held = await busy(b, gate)
        waiting = asyncio.ensure_future(b.run_async(x(2), seq(2, start=True)))
        await queued(b, 1)
        closing = asyncio.ensure_future(asyncio.to_thread(b.close))
        with pytest.raises(Unavailable, match="unloaded before the request ran"):
            await waiting
        gate.open()
        await held
        await closing
        with pytest.raises(Unavailable, match="unloading"):
            await b.run_async(x(3), seq(3, start=True))

    run(main)


def test_sequences_spread_over_instances_and_stay_on_theirs(made: list[SequenceBatcher]) -> None:
    b = build(made, config(max_batch_size=1), instances=2)

    async def main() -> None:
        await asyncio.gather(*(b.run_async(x(s), seq(s, start=True)) for s in (1, 2)))
        await asyncio.gather(*(b.run_async(x(s), seq(s, end=True)) for s in (1, 2)))

    run(main)
    lanes = [{scalar(r, "CORRID") for e in executions(b, lane) for r in e} for lane in (0, 1)]
    assert sorted(map(sorted, lanes)) == [[1], [2]]


def test_the_in_process_call_says_it_cannot_carry_sequence_parameters(made: list[SequenceBatcher]) -> None:
    b = build(made, config())
    with pytest.raises(InvalidArgument, match="is a sequence model.*only REST and gRPC"):
        b.run(x(1))


@pytest.mark.parametrize(
    ("body", "extra", "message"),
    [
        (CONTROLS, "response_cache { enable: true }", "response_cache cannot serve a sequence model"),
        ('control_input [ { name: "INPUT" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] } ]', "",
         "control_input 'INPUT' is also listed under input"),
        ('control_input [ { name: "A" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] },'
         ' { name: "B" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] } ]', "",
         "CONTROL_SEQUENCE_START is given twice"),
        ('control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] } ]', "",
         "data_type TYPE_FP32; expected TYPE_UINT64"),
        ('control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [1] } ] } ]', "",
         "set exactly one of int32_false_true"),
        ('state [ { input_name: "S" output_name: "T" data_type: TYPE_INT32 dims: [ -1 ] '
         'initial_state { name: "i" data_type: TYPE_INT32 dims: [ -1 ] zero_data: true } } ]', "",
         "must be concrete"),
        ('state [ { input_name: "S" output_name: "T" data_type: TYPE_INT32 dims: [ 1 ] '
         'initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } ]', "", "field 'name' must be set"),
        ('oldest { preferred_batch_size: [ 9 ] }', "", r"preferred_batch_size \[9\] must lie in 1..4"),
    ],
)
def test_bad_configs_fail_the_load_naming_the_field(made: list[SequenceBatcher], body: str, extra: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        build(made, config(body=body, extra=extra))
