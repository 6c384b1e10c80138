"""triton_python_backend_utils as a model imports it: tensors, errors, requests, senders, config, metrics, logs.

All in-process (no server): what a model's own unit test would exercise.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import numpy as np
import pytest
import torch

import triton_python_backend_utils as pb_utils
from servelab.backends.base import StreamItem
from servelab.backends.pb_utils._errors import from_servelab, to_servelab
from servelab.errors import ErrorCode, NotFound, Unavailable


def test_the_module_imports_in_a_plain_python() -> None:
    code = "import triton_python_backend_utils as pb; print(pb.TritonError.CANCELLED, pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["7", "1"]


@pytest.mark.parametrize(("name", "dtype", "code"), [
    ("TYPE_BOOL", np.bool_, 1), ("TYPE_UINT8", np.uint8, 2), ("TYPE_INT32", np.int32, 8),
    ("TYPE_INT64", np.int64, 9), ("TYPE_FP16", np.float16, 10), ("TYPE_FP32", np.float32, 11),
    ("TYPE_FP64", np.float64, 12), ("TYPE_STRING", np.object_, 13),
])  # fmt: skip
def test_datatype_names_and_codes(name: str, dtype: type, code: int) -> None:
    assert np.dtype(pb_utils.triton_string_to_numpy(name)) == np.dtype(dtype)
    assert pb_utils.numpy_to_triton_type(dtype) == code
    assert np.dtype(pb_utils.triton_to_numpy_type(code)) == np.dtype(dtype)
    assert pb_utils.Tensor("t", np.zeros(2, dtype)).triton_dtype() == code


def test_unknown_data_type_names_say_what_exists() -> None:
    with pytest.raises(KeyError, match="TYPE_FP32"):
        pb_utils.triton_string_to_numpy("FP32")


def test_tensor_holds_bytes_as_objects_and_serialises_them_as_triton_does() -> None:
    t = pb_utils.Tensor("s", np.array(["héllo", "x"]))
    assert t.as_numpy().dtype == object and t.as_numpy().tolist() == ["héllo".encode(), b"x"]
    raw = pb_utils.serialize_byte_tensor(t.as_numpy())
    assert raw == b"\x06\x00\x00\x00h\xc3\xa9llo\x01\x00\x00\x00x"
    assert pb_utils.deserialize_bytes_tensor(raw).tolist() == ["héllo".encode(), b"x"]
    assert t.shape() == [2] and t.name() == "s" and t.is_cpu()


def test_dlpack_both_ways_without_a_copy() -> None:
    source = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    from_capsule = pb_utils.Tensor.from_dlpack("A", torch.utils.dlpack.to_dlpack(source))
    from_object = pb_utils.Tensor.from_dlpack("B", source)
    source[0, 0] = 42.0  # same memory
    assert from_capsule.as_numpy()[0, 0] == 42.0 and from_object.as_numpy()[0, 0] == 42.0
    back = torch.utils.dlpack.from_dlpack(from_object.to_dlpack())
    assert back.shape == (2, 3) and torch.equal(back, source)
    assert torch.equal(torch.from_dlpack(from_capsule), source)
    with pytest.raises(pb_utils.TritonModelException, match="BYTES"):
        pb_utils.Tensor("s", np.array([b"x"], dtype=object)).to_dlpack()


def test_error_codes_map_to_servelab_codes_and_back() -> None:
    pairs = {"UNKNOWN": ErrorCode.UNKNOWN, "INTERNAL": ErrorCode.INTERNAL, "NOT_FOUND": ErrorCode.NOT_FOUND,
             "INVALID_ARG": ErrorCode.INVALID_ARG, "UNAVAILABLE": ErrorCode.UNAVAILABLE,
             "UNSUPPORTED": ErrorCode.UNSUPPORTED, "ALREADY_EXISTS": ErrorCode.ALREADY_EXISTS,
             "CANCELLED": ErrorCode.CANCELLED}  # fmt: skip
    for name, code in pairs.items():
        error = pb_utils.TritonError("error code: " + name, getattr(pb_utils.TritonError, name))
        converted = to_servelab(error)
        assert converted.code is code and converted.message == "error code: " + name
        assert from_servelab(converted).code() == error.code()
    assert pb_utils.TritonError("m").code() == pb_utils.TritonError.INTERNAL
    assert from_servelab(Unavailable("busy")).message() == "busy"
    with pytest.raises(ValueError, match="0-7"):
        pb_utils.TritonError("m", 42)


def test_a_request_offers_triton_spellings_and_servelab_ones() -> None:
    x = pb_utils.Tensor("X", np.arange(3, dtype=np.int32))
    request = pb_utils.InferenceRequest(model_name=b"adder", inputs=[x], requested_output_names=["Y"],
                                        parameters={"k": 1, "b": True}, correlation_id="seq-1")  # fmt: skip
    assert [t.name() for t in request.inputs()] == ["X"] and request.inputs["X"].tolist() == [0, 1, 2]
    assert request.get("X").tolist() == [0, 1, 2] and request.model_name == "adder"
    assert pb_utils.get_input_tensor_by_name(request, "X").as_numpy().tolist() == [0, 1, 2]
    assert pb_utils.get_input_tensor_by_name(request, "Z") is None
    assert json.loads(request.parameters()) == {"k": 1, "b": True} and request.correlation_id() == "seq-1"
    assert request.requested_output_names() == ["Y"] and not request.is_cancelled()
    with pytest.raises(KeyError, match=r"the request has \['X'\]"):
        request.get("Z")
    with pytest.raises(pb_utils.TritonModelException, match="bool, int or str"):
        pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[], parameters={"f": 1.5})
    with pytest.raises(pb_utils.TritonModelException, match="Correlation ID"):
        pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[], correlation_id=1.5)  # type: ignore[arg-type]


def test_bls_outside_a_server_says_so() -> None:
    request = pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[])
    for decoupled in (False, True):
        with pytest.raises(pb_utils.TritonModelException, match="need a server"):
            request.exec(decoupled=decoupled)


def test_responses_carry_outputs_errors_and_parameters() -> None:
    out = pb_utils.Tensor("Y", np.ones(2, np.float32))
    response = pb_utils.InferenceResponse([out], parameters={"n": 2})
    assert pb_utils.get_output_tensor_by_name(response, "Y") is out and not response.has_error()
    assert json.loads(response.parameters()) == {"n": 2} and response.as_dict()["Y"].tolist() == [1, 1]
    failed = pb_utils.InferenceResponse(error=pb_utils.TritonError("no", pb_utils.TritonError.NOT_FOUND))
    assert failed.has_error() and failed.error().message() == "no" and failed.output_tensors() == []
    with pytest.raises(pb_utils.TritonModelException, match="pb_utils.Tensor"):
        pb_utils.InferenceResponse([np.ones(2)])  # type: ignore[list-item]
    plain = pb_utils.InferenceResponse([out])  # no parameters: the JSON of an empty object, as in Triton
    assert plain.parameters() == "{}" and plain._item(final=True).parameters == {}


def test_the_request_execute_gets_reads_like_one_a_model_builds() -> None:
    """The server's request for execute (built without __init__) answers every accessor __init__'s would."""
    from servelab.backends.pb_utils._request import InferenceRequest

    built = InferenceRequest(model_name="m", inputs={"X": np.ones(2, np.float32)}, requested_output_names=["Y"])
    for params, wanted in (({}, {}), ({"sequence_id": 7, "k": "v"}, {"sequence_id": 7, "k": "v"})):
        served = InferenceRequest._for_execute({"X": np.ones(2, np.float32)}, params, ["Y"], "m", None, lambda: False)  # type: ignore[arg-type]
        assert json.loads(served.parameters()) == wanted
        assert served.correlation_id() == params.get("sequence_id", 0) and served.request_id() == ""
        assert (served.flags(), served.timeout(), served.requested_output_names(), served.model_name) == (
            built.flags(), built.timeout(), built.requested_output_names(), built.model_name)
        assert served.inputs["X"].tolist() == built.inputs["X"].tolist() and not served.is_cancelled()


def test_a_sender_closes_with_the_final_flag() -> None:
    sent: list[tuple[int, StreamItem]] = []
    sender = pb_utils.InferenceResponseSender(lambda i, item: sent.append((i, item)), 3, lambda: False)
    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.zeros(1))]))
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert [(i, item.final, item.outputs is None) for i, item in sent] == [(3, False, False), (3, True, True)]
    with pytest.raises(pb_utils.TritonModelException, match="Response sender has been closed"):
        sender.send(pb_utils.InferenceResponse())
    with pytest.raises(pb_utils.TritonModelException, match="flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL"):
        pb_utils.InferenceResponseSender(lambda i, item: None, 0, lambda: False).send()
    error = pb_utils.InferenceResponse(error=pb_utils.TritonError("gone", pb_utils.TritonError.NOT_FOUND))
    errors: list[StreamItem] = []
    pb_utils.InferenceResponseSender(lambda i, item: errors.append(item), 0, lambda: True).send(error, 1)
    assert isinstance(errors[0].error, NotFound) and errors[0].final


def test_config_helpers_read_triton_json() -> None:
    config = {"input": [{"name": "IN", "dims": [1]}], "output": [{"name": "OUT", "data_type": "TYPE_INT32"}],
              "model_transaction_policy": {"decoupled": True}}  # fmt: skip
    assert pb_utils.get_input_config_by_name(config, "IN") == {"name": "IN", "dims": [1]}
    assert pb_utils.get_output_config_by_name(config, "OUT")["data_type"] == "TYPE_INT32"  # type: ignore[index]
    assert pb_utils.get_output_config_by_name(config, "NONE") is None
    assert pb_utils.using_decoupled_model_transaction_policy(config)
    assert not pb_utils.using_decoupled_model_transaction_policy({})


def test_auto_complete_setters_refuse_what_the_config_contradicts() -> None:
    config = pb_utils.ModelConfig(json.dumps({"name": "m", "max_batch_size": 8, "input": [
        {"name": "A", "data_type": "TYPE_FP32", "dims": [4]}], "output": []}))  # fmt: skip
    config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [4], "optional": True})
    config.add_input({"name": "B", "data_type": "TYPE_INT32", "dims": [2]})
    config.add_output({"name": "C", "data_type": "TYPE_FP32", "dims": [4]})
    config.set_max_batch_size(16)
    config.set_dynamic_batching()
    config.set_model_transaction_policy({"decoupled": True})
    d = config.as_dict()
    assert [i["name"] for i in d["input"]] == ["A", "B"] and d["input"][0]["optional"] is True
    assert d["max_batch_size"] == 16 and d["dynamic_batching"] == {} and d["model_transaction_policy"]["decoupled"]
    for call, match in [
        (lambda: config.set_max_batch_size(4), "configuration specified max_batch_size 16"),
        (lambda: config.add_input({"name": "A", "data_type": "TYPE_INT8", "dims": [4]}), "expects datatype TYPE_FP32"),
        (lambda: config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [5]}), "specifies dims"),
        (lambda: config.add_output({"name": "D", "dims": [1]}), "missing 'data_type'"),
        (lambda: config.add_output({"name": "D", "data_type": "TYPE_FP32", "dims": [1], "x": 1}), "other than"),
        (lambda: config.set_model_transaction_policy({"decoupled": False}), "already set"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()
    sequence = pb_utils.ModelConfig({"name": "s", "sequence_batching": {}})
    with pytest.raises(ValueError, match="scheduling_choice as 'sequence_batching'"):
        sequence.set_dynamic_batching()


def test_metric_families_outside_a_server_keep_their_values_here() -> None:
    counter = pb_utils.MetricFamily("unit_requests", "requests", pb_utils.MetricFamily.COUNTER)
    metric = counter.Metric(labels={"model": "m"})
    metric.increment(2)
    metric.increment(3.5)
    assert metric.value() == 5.5
    for call, match in [(lambda: metric.increment(-1), ">= 0"), (lambda: metric.set(1), "not set")]:
        with pytest.raises(pb_utils.TritonModelException, match=match):
            call()
    gauge = pb_utils.MetricFamily("unit_depth", "depth", pb_utils.MetricFamily.GAUGE).Metric()
    gauge.set(4)
    gauge.increment(-1)
    assert gauge.value() == 3
    histogram = pb_utils.MetricFamily("unit_latency", "latency", pb_utils.MetricFamily.HISTOGRAM)
    with pytest.raises(pb_utils.TritonModelException, match="needs buckets"):
        histogram.Metric(labels={"a": "b"})
    histogram.Metric(labels={"a": "b"}, buckets=[0.1, 1.0]).observe(0.5)
    with pytest.raises(pb_utils.TritonModelException, match="already exists as a counter"):
        pb_utils.MetricFamily("unit_requests", "requests", pb_utils.MetricFamily.GAUGE)
    with pytest.raises(pb_utils.TritonModelException, match="server's"):
        pb_utils.MetricFamily("nv_inference_count", "mine", pb_utils.MetricFamily.COUNTER)


def test_logger_writes_to_the_model_log(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="servelab.model"):
        pb_utils.Logger.log_info("info line")
        pb_utils.Logger.log_warn("warn line")
        pb_utils.Logger.log_verbose("verbose line")
        pb_utils.Logger.log("error line", pb_utils.Logger.ERROR)
    got = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert got == [(logging.INFO, "info line"), (logging.WARNING, "warn line"), (logging.DEBUG, "verbose line"),
                   (logging.ERROR, "error line")]  # fmt: skip


def test_the_model_loading_api_says_what_to_use_instead() -> None:
    for call in (lambda: pb_utils.load_model("m"), lambda: pb_utils.unload_model("m"), lambda: pb_utils.is_model_ready("m")):
        with pytest.raises(pb_utils.TritonModelException, match="repository API"):
            call()
