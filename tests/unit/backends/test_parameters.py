"""The typed parameter schemas: read what config.pbtxt says, refuse what it must not, write back the same."""

from __future__ import annotations

import pytest

from servelab.backends.parameters import (
    BACKEND_PARAMETERS,
    OnnxRuntimeParameters,
    OpenVinoParameters,
    SchedulerParameters,
    TensorFlowParameters,
    TorchParameters,
    parameters_for,
)
from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc
from servelab.repository import config_to_text, parse_config_text


def _config(**params: str) -> mc.ModelConfig:
    config = mc.ModelConfig(name="m")
    for key, value in params.items():
        config.parameters[key].string_value = value
    return config


def test_defaults_when_nothing_is_set() -> None:
    ort = OnnxRuntimeParameters.read(_config())
    assert ort.intra_op_thread_count is None and ort.graph_optimization_level == "all"
    assert ort.execution_providers == () and ort.allow_spinning is None
    ov = OpenVinoParameters.read(_config())
    assert (ov.performance_hint, ov.inference_precision_hint, ov.num_streams) == ("LATENCY", "f32", None)
    assert TorchParameters.read(_config()).intra_op_thread_count is None
    assert TensorFlowParameters.read(_config()).signature_name == "serving_default"
    assert SchedulerParameters.read(_config()).instance_mode == "auto"


def test_strings_are_parsed_into_types() -> None:
    ort = OnnxRuntimeParameters.read(_config(
        intra_op_thread_count="2", allow_spinning="off", graph_optimization_level=" Basic ",
        execution_providers="CUDAExecutionProvider, CPUExecutionProvider",
    ))  # fmt: skip
    assert ort.intra_op_thread_count == 2 and ort.allow_spinning is False
    assert ort.graph_optimization_level == "basic"
    assert ort.execution_providers == ("CUDAExecutionProvider", "CPUExecutionProvider")
    ov = OpenVinoParameters.read(_config(PERFORMANCE_HINT="throughput", NUM_STREAMS="auto"))
    assert ov.performance_hint == "THROUGHPUT" and ov.num_streams == "AUTO"
    assert OpenVinoParameters.read(_config(NUM_STREAMS="3")).num_streams == 3
    sched = SchedulerParameters.read(_config(instance_mode="Process", inline_execution_us="0"))
    assert sched.instance_mode == "process" and sched.inline_execution_us == 0


@pytest.mark.parametrize(
    ("schema", "key", "value", "expected"),
    [
        (OnnxRuntimeParameters, "intra_op_thread_count", "two", "integer"),
        (OnnxRuntimeParameters, "intra_op_thread_count", "-1", "greater than or equal to 0"),
        (OnnxRuntimeParameters, "allow_spinning", "maybe", "0 or 1"),
        (OnnxRuntimeParameters, "graph_optimization_level", "max", "'disable', 'basic', 'extended' or 'all'"),
        (OpenVinoParameters, "PERFORMANCE_HINT", "FAST", "LATENCY"),
        (OpenVinoParameters, "INFERENCE_PRECISION_HINT", "int4", "f32"),
        (TorchParameters, "intra_op_thread_count", "0", "greater than or equal to 1"),
        (SchedulerParameters, "instance_mode", "fork", "'auto', 'thread' or 'process'"),
    ],
)
def test_bad_values_name_the_key_the_expectation_and_the_value(
    schema: type, key: str, value: str, expected: str
) -> None:
    with pytest.raises(InvalidArgument) as info:
        schema.read(_config(**{key: value}))
    message = info.value.message
    assert f"'{key}'" in message and expected in message and repr(value) in message


def test_write_then_read_round_trips_through_config_text() -> None:
    config = _config(instance_mode="thread", unrelated_key="kept")
    OnnxRuntimeParameters(intra_op_thread_count=2, allow_spinning=False, graph_optimization_level="extended").write(
        config
    )
    OpenVinoParameters(performance_hint="THROUGHPUT", num_streams=2, inference_num_threads=1).write(config)
    SchedulerParameters(instance_mode="auto", inline_execution_us=0).write(config)
    text = config_to_text(config)
    back = parse_config_text(text, "test")
    assert back.parameters["allow_spinning"].string_value == "0"
    assert back.parameters["PERFORMANCE_HINT"].string_value == "THROUGHPUT"
    assert back.parameters["unrelated_key"].string_value == "kept"
    assert "instance_mode" not in back.parameters  # the default is not written; the old value is replaced
    assert OnnxRuntimeParameters.read(back) == OnnxRuntimeParameters(
        intra_op_thread_count=2, allow_spinning=False, graph_optimization_level="extended"
    )
    assert OpenVinoParameters.read(back).num_streams == 2
    assert SchedulerParameters.read(back).inline_execution_us == 0


def test_every_runtime_backend_has_a_schema() -> None:
    assert set(BACKEND_PARAMETERS) == {
        "onnxruntime", "openvino", "python", "pytorch", "tensorflow", "tensorrt", "torchserve_handler"
    }
    assert parameters_for("pytorch") is TorchParameters
    with pytest.raises(InvalidArgument, match="no parameter schema for backend 'jax'"):
        parameters_for("jax")
