"""Write stateful (sequence-batched) example models, built here with onnx.helper (nothing is downloaded).

    python examples/sequence_models/build_sequence_models.py [--out examples/sequence_models/repository]

The configs are those of Triton's docs/examples/model_repository where Triton has the model, so that
Triton's own client examples (simple_http_sequence_sync_infer_client.py,
simple_grpc_sequence_stream_infer_client.py, ... with and without ``--dyna``) run unchanged against
these models:

- ``simple_sequence``             direct strategy, START + READY controls: OUTPUT = READY * (INPUT + START)
- ``simple_dyna_sequence``        oldest strategy, START, END, READY, CORRID (UINT64), 2 instances:
                                  OUTPUT = READY * (INPUT + START + END * CORRID)
- ``simple_string_dyna_sequence`` oldest, CORRID as TYPE_STRING and implicit state: an accumulator,
                                  OUTPUT = READY * (running sum of INPUT + END * int(CORRID)); the state
                                  (the running sum) lives in the server between requests
- ``sequence_state``              implicit state with ``initial_state { zero_data }``, no controls, direct:
                                  OUTPUT = OUTPUT_STATE = INPUT_STATE + INPUT (both outputs visible)

INT32 [1] INPUT and OUTPUT, max_batch_size 8 (a batch of requests from different sequences), KIND_CPU.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent
MODELS = ("simple_sequence", "simple_dyna_sequence", "simple_string_dyna_sequence", "sequence_state")
I32, U64, STR, BOOL = TensorProto.INT32, TensorProto.UINT64, TensorProto.STRING, TensorProto.BOOL


def _control(name: str, kind: str, extra: str = "int32_false_true: [ 0, 1 ]") -> str:
    return f'{{ name: "{name}" control [ {{ kind: {kind} {extra} }} ] }}'


START = _control("START", "CONTROL_SEQUENCE_START")
END = _control("END", "CONTROL_SEQUENCE_END")
READY = _control("READY", "CONTROL_SEQUENCE_READY")
IO = (
    'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]',
    'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]',
)


def _save(path: Path, nodes: list[onnx.NodeProto], inputs: dict[str, int], outputs: list[str], name: str) -> None:
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, t, ["batch", 1]) for n, t in inputs.items()],
        [helper.make_tensor_value_info(n, I32, ["batch", 1]) for n in outputs],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)


def _config(folder: Path, *lines: str) -> None:
    (folder / "config.pbtxt").write_text("\n".join(lines) + "\n")


def _header(name: str) -> tuple[str, ...]:
    return f'name: "{name}"', 'platform: "onnxruntime_onnx"', "max_batch_size: 8"


def build_simple_sequence(repo: Path) -> None:
    d = repo / "simple_sequence"
    nodes = [helper.make_node("Add", ["INPUT", "START"], ["sum"]), helper.make_node("Mul", ["READY", "sum"], ["OUTPUT"])]
    _save(d / "1" / "model.onnx", nodes, {"INPUT": I32, "START": I32, "READY": I32}, ["OUTPUT"], "simple_sequence")
    _config(d, *_header("simple_sequence"), f"sequence_batching {{ control_input [ {START}, {READY} ] }}", *IO,
            "instance_group [ { kind: KIND_CPU } ]")  # fmt: skip


def build_simple_dyna_sequence(repo: Path) -> None:
    d = repo / "simple_dyna_sequence"
    nodes = [
        helper.make_node("Cast", ["CORRID"], ["corrid"], to=I32),
        helper.make_node("Add", ["INPUT", "START"], ["a"]),
        helper.make_node("Mul", ["END", "corrid"], ["e"]),
        helper.make_node("Add", ["a", "e"], ["sum"]),
        helper.make_node("Mul", ["READY", "sum"], ["OUTPUT"]),
    ]
    inputs = {"INPUT": I32, "START": I32, "END": I32, "READY": I32, "CORRID": U64}
    _save(d / "1" / "model.onnx", nodes, inputs, ["OUTPUT"], "simple_dyna_sequence")
    corrid = _control("CORRID", "CONTROL_SEQUENCE_CORRID", "data_type: TYPE_UINT64")
    _config(
        d, *_header("simple_dyna_sequence"), "sequence_batching {", "  max_sequence_idle_microseconds: 10000000",
        "  oldest { max_candidate_sequences: 1024 max_queue_delay_microseconds: 10000 }",
        f"  control_input [ {START}, {END}, {READY}, {corrid} ]", "}", *IO, "instance_group [ { count: 2 kind: KIND_CPU } ]",
    )  # fmt: skip


def build_simple_string_dyna_sequence(repo: Path) -> None:
    d = repo / "simple_string_dyna_sequence"
    nodes = [
        helper.make_node("Cast", ["START"], ["starting"], to=BOOL),
        helper.make_node("Add", ["INPUT_STATE", "INPUT"], ["more"]),
        helper.make_node("Where", ["starting", "INPUT", "more"], ["OUTPUT_STATE"]),
        helper.make_node("Cast", ["CORRID"], ["corrid64"], to=TensorProto.INT64),
        helper.make_node("Cast", ["corrid64"], ["corrid"], to=I32),
        helper.make_node("Mul", ["END", "corrid"], ["e"]),
        helper.make_node("Add", ["OUTPUT_STATE", "e"], ["sum"]),
        helper.make_node("Mul", ["READY", "sum"], ["OUTPUT"]),
    ]
    inputs = {"INPUT": I32, "START": I32, "END": I32, "READY": I32, "CORRID": STR, "INPUT_STATE": I32}
    _save(d / "1" / "model.onnx", nodes, inputs, ["OUTPUT", "OUTPUT_STATE"], "simple_string_dyna_sequence")
    corrid = _control("CORRID", "CONTROL_SEQUENCE_CORRID", "data_type: TYPE_STRING")
    _config(
        d, *_header("simple_string_dyna_sequence"), "sequence_batching {", "  max_sequence_idle_microseconds: 10000000",
        "  oldest { max_candidate_sequences: 64 }", f"  control_input [ {START}, {END}, {READY}, {corrid} ]",
        '  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] } ]',
        "}", *IO, "instance_group [ { kind: KIND_CPU } ]",
    )  # fmt: skip


def build_sequence_state(repo: Path) -> None:
    d = repo / "sequence_state"
    nodes = [helper.make_node("Add", ["INPUT_STATE", "INPUT"], ["OUTPUT_STATE"]),
             helper.make_node("Identity", ["OUTPUT_STATE"], ["OUTPUT"])]  # fmt: skip
    _save(d / "1" / "model.onnx", nodes, {"INPUT": I32, "INPUT_STATE": I32}, ["OUTPUT", "OUTPUT_STATE"], "sequence_state")
    _config(
        d, *_header("sequence_state"), "sequence_batching {", "  max_sequence_idle_microseconds: 10000000",
        '  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ]',
        '            initial_state { name: "zeros" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } ]', "}", IO[0],
        'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] } ]',
    )  # fmt: skip


BUILDERS = {
    "simple_sequence": build_simple_sequence,
    "simple_dyna_sequence": build_simple_dyna_sequence,
    "simple_string_dyna_sequence": build_simple_string_dyna_sequence,
    "sequence_state": build_sequence_state,
}


def build(out: Path, names: tuple[str, ...] = MODELS) -> Path:
    """(Re)write the named models under ``out``; return it."""
    for name in names:
        shutil.rmtree(out / name, ignore_errors=True)
        BUILDERS[name](out)
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))  # examples/, for the builders' shared command line
    from _build_cli import build_main

    build_main(__doc__, build, HERE, "sequence models", MODELS)
