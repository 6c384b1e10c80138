"""Python models written against Triton's API on a real `servelab serve`: BLS (sync, async, to a decoupled
model), decoupled models over gRPC ModelStreamInfer (zero, one, many responses; the empty final one on
request), custom metrics on /metrics, auto_complete_config without a config.pbtxt, and TritonError codes
as gRPC and HTTP statuses. Driven by stock tritonclient."""

from __future__ import annotations

import queue
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from harness.models import auto_complete_py, write_python_model
from harness.repository import PYTHON, model_config, write_config
from harness.servers import ServerProcess, running_server

WAIT_S = 60.0

ADD_SUB = """
import json
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dtype = pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(config, "OUTPUT0")["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", (a + b).astype(self.dtype)),
                pb_utils.Tensor("OUTPUT1", (a - b).astype(self.dtype))]))
        return responses
"""

#: calls the model named by MODEL_NAME with its inputs, returns that model's outputs
BLS_SYNC = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            name = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0]
            inputs = [pb_utils.get_input_tensor_by_name(request, n) for n in ("INPUT0", "INPUT1")]
            answer = pb_utils.InferenceRequest(model_name=name, requested_output_names=["OUTPUT0", "OUTPUT1"],
                                               inputs=inputs).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            responses.append(pb_utils.InferenceResponse(output_tensors=answer.output_tensors()))
        return responses
"""

#: async def execute: two async_exec calls to add_sub at once, OUTPUT0 of the first, OUTPUT1 of the second
BLS_ASYNC = """
import asyncio
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [pb_utils.get_input_tensor_by_name(request, n) for n in ("INPUT0", "INPUT1")]
            calls = [pb_utils.InferenceRequest(model_name="add_sub", requested_output_names=[name],
                                               inputs=inputs).async_exec() for name in ("OUTPUT0", "OUTPUT1")]
            first, second = await asyncio.gather(*calls)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.get_output_tensor_by_name(first, "OUTPUT0"),
                pb_utils.get_output_tensor_by_name(second, "OUTPUT1")]))
        return responses
"""

#: decoupled: one response per element of IN (OUT = the element, IDX = its position, the request's id as
#: response parameter "request"), sent from a thread that outlives execute, then the final flag alone
REPEAT = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        import json
        if not pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"])):
            raise pb_utils.TritonModelException("repeat needs model_transaction_policy { decoupled: true }")

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().copy()
            threading.Thread(target=self.send, args=(request.get_response_sender(), values, request.request_id()),
                             daemon=True).start()
        return None

    def send(self, sender, values, request_id):
        for i, value in enumerate(values):
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], np.int32)),
                                                    pb_utils.Tensor("IDX", np.array([i], np.uint32))],
                                                   parameters={"request": request_id}))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

#: sums what every response of the decoupled model "repeat" holds
BLS_DECOUPLED = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(model_name="repeat", requested_output_names=["OUT"],
                                             inputs=[pb_utils.get_input_tensor_by_name(request, "IN")])
            total, count = np.zeros(1, np.int32), 0
            for response in call.exec(decoupled=True):
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                if response.output_tensors():
                    total += pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()
                    count += 1
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total),
                                                         pb_utils.Tensor("COUNT", np.array([count], np.int32))]))
        return responses
"""

METRICS = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"], "version": args["model_version"]}
        self.seen = pb_utils.MetricFamily("it_requests_seen", "Requests seen by the model",
                                          pb_utils.MetricFamily.COUNTER).Metric(labels=labels)
        self.last = pb_utils.MetricFamily("it_last_value", "The last value sent",
                                          pb_utils.MetricFamily.GAUGE).Metric(labels=labels)
        self.sizes = pb_utils.MetricFamily("it_value_size", "Values sent",
                                           pb_utils.MetricFamily.HISTOGRAM).Metric(labels=labels, buckets=[1.0, 10.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            self.seen.increment(1)
            self.last.set(float(x.reshape(-1)[0]))
            self.sizes.observe(float(x.reshape(-1)[0]))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", x)]))
        return responses
"""

CODES = ("UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED", "ALREADY_EXISTS", "CANCELLED")
ERROR_CODE = f"""
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            code = pb_utils.get_input_tensor_by_name(request, "ERROR_CODE").as_numpy()[0][0].decode()
            if code in {CODES!r}:
                error = pb_utils.TritonError("error code: " + code, getattr(pb_utils.TritonError, code))
            else:
                error = pb_utils.TritonError("unrecognized error code: " + code)
            responses.append(pb_utils.InferenceResponse(error=error))
        return responses
"""
#: Triton's own statuses for each code (qa/L0_backend_python lifecycle test; http_server.cc)
GRPC_STATUS = {"UNKNOWN": "UNKNOWN", "INTERNAL": "INTERNAL", "NOT_FOUND": "NOT_FOUND", "INVALID_ARG": "INVALID_ARGUMENT",
               "UNAVAILABLE": "UNAVAILABLE", "UNSUPPORTED": "UNIMPLEMENTED", "ALREADY_EXISTS": "ALREADY_EXISTS",
               "CANCELLED": "CANCELLED"}  # fmt: skip
HTTP_STATUS = {"UNKNOWN": 400, "INTERNAL": 500, "NOT_FOUND": 404, "INVALID_ARG": 400, "UNAVAILABLE": 503,
               "UNSUPPORTED": 501, "ALREADY_EXISTS": 409, "CANCELLED": 499}  # fmt: skip

FOUR = [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])]
TWO_OUT = [("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])]
DECOUPLED = "model_transaction_policy { decoupled: true }"


def _model(repo: Path, name: str, source: str, config: str | None) -> None:
    write_python_model(repo / name, textwrap.dedent(source))
    if config is not None:
        write_config(repo / name, config)


def build_repository(repo: Path) -> Path:
    _model(repo, "add_sub", ADD_SUB, model_config("add_sub", PYTHON, FOUR, TWO_OUT, max_batch_size=0))
    _model(repo, "bls_sync", BLS_SYNC, model_config("bls_sync", PYTHON, [("MODEL_NAME", "BYTES", [1]), *FOUR],
                                                    TWO_OUT, max_batch_size=0))  # fmt: skip
    _model(repo, "bls_async", BLS_ASYNC, model_config("bls_async", PYTHON, FOUR, TWO_OUT, max_batch_size=0))
    _model(repo, "repeat", REPEAT, model_config("repeat", PYTHON, [("IN", "INT32", [-1])],
                                                [("OUT", "INT32", [1]), ("IDX", "UINT32", [1])],
                                                max_batch_size=0, extra=DECOUPLED))  # fmt: skip
    _model(repo, "bls_decoupled", BLS_DECOUPLED, model_config(
        "bls_decoupled", PYTHON, [("IN", "INT32", [-1])], [("SUM", "INT32", [1]), ("COUNT", "INT32", [1])],
        max_batch_size=0))  # fmt: skip
    _model(repo, "metered", METRICS, model_config("metered", PYTHON, [("INPUT", "FP32", [1])],
                                                  [("OUTPUT", "FP32", [1])], max_batch_size=0,
                                                  extra="instance_group [{ count: 2, kind: KIND_CPU }]"))  # fmt: skip
    _model(repo, "auto", auto_complete_py(), None)
    _model(repo, "error_code", ERROR_CODE, model_config("error_code", PYTHON, [("ERROR_CODE", "BYTES", [1])],
                                                        [("DUMMY_OUT", "BYTES", [1])], max_batch_size=4))  # fmt: skip
    return repo


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, log_dir: Path) -> Iterator[ServerProcess]:
    repo = build_repository(tmp_path_factory.mktemp("triton-api") / "models")
    with running_server(repo, log_dir, "triton-api") as server:
        yield server


def _http_inputs(arrays: dict[str, np.ndarray], module: Any = httpclient) -> list[Any]:
    inputs = []
    for name, array in arrays.items():
        datatype = "BYTES" if array.dtype == object else {np.float32: "FP32", np.int32: "INT32"}[array.dtype.type]
        tensor = module.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def _add_sub_inputs(model: str | None = None) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    a, b = rng.random(4, dtype=np.float32), rng.random(4, dtype=np.float32)
    arrays = {"INPUT0": a, "INPUT1": b}
    if model is not None:
        arrays["MODEL_NAME"] = np.array([model.encode()], dtype=object)
    return arrays, a, b


def test_bls_calls_other_models_sync_and_async(served: ServerProcess) -> None:
    with httpclient.InferenceServerClient(served.http_address) as client:
        for model, arrays_for in (("bls_sync", "add_sub"), ("bls_async", None)):
            arrays, a, b = _add_sub_inputs(arrays_for)
            result = client.infer(model, _http_inputs(arrays))
            np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b)
        arrays, _, _ = _add_sub_inputs("undefined_model")
        with pytest.raises(InferenceServerException, match="Request for unknown model: 'undefined_model' is not found") as failed:
            client.infer("bls_sync", _http_inputs(arrays))
        assert failed.value.status() == "500" and "TritonModelException" in failed.value.message()
        stats = client.get_inference_statistics("add_sub")["model_stats"][0]["inference_stats"]
        assert stats["success"]["count"] >= 3  # the BLS calls entered the server like requests


def _stream(served: ServerProcess, requests: list[tuple[str, np.ndarray]], expected: int,
            **options: Any) -> list[Any]:  # fmt: skip
    """Send (id, IN) requests to ``repeat`` on one stream; the ``expected`` results (or errors) in order."""
    got: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(served.grpc_address) as client:
        client.start_stream(callback=lambda result, error: got.put(error or result))
        try:
            for request_id, values in requests:
                client.async_stream_infer("repeat", _http_inputs({"IN": values}, grpcclient), request_id=request_id,
                                          outputs=[grpcclient.InferRequestedOutput("OUT")], **options)  # fmt: skip
            answers = [got.get(timeout=WAIT_S) for _ in range(expected)]
        finally:
            client.stop_stream()
    assert got.empty(), f"more responses than expected: {got.get()}"
    return answers


def _final(result: Any) -> bool:
    return bool(result.get_response().parameters["triton_final_response"].bool_param)


def test_a_decoupled_model_answers_zero_one_or_many_times_per_request(served: ServerProcess) -> None:
    requests = [("many", np.array([4, 2, 7], np.int32)), ("none", np.zeros(0, np.int32)), ("one", np.array([9], np.int32))]
    answers = _stream(served, requests, expected=4)
    by_id: dict[str, list[Any]] = {}
    for result in answers:
        assert not isinstance(result, InferenceServerException), result
        by_id.setdefault(result.get_response().id, []).append(result)
    assert sorted(by_id) == ["many", "one"]
    assert [int(r.as_numpy("OUT")[0]) for r in by_id["many"]] == [4, 2, 7] and by_id["one"][0].as_numpy("OUT").tolist() == [9]
    assert [r.as_numpy("IDX") for r in by_id["many"]] == [None] * 3  # only the requested output comes
    assert all(r.get_response().parameters["request"].string_param == rid for rid, rs in by_id.items() for r in rs)
    assert not any(_final(r) for r in answers)


def test_the_empty_final_response_comes_when_the_client_asks(served: ServerProcess) -> None:
    answers = _stream(served, [("two", np.array([1, 2], np.int32)), ("none", np.zeros(0, np.int32))], expected=4,
                      enable_empty_final_response=True)  # fmt: skip
    finals = [r for r in answers if _final(r)]
    assert sorted(r.get_response().id for r in finals) == ["none", "two"]
    assert all(not r.get_response().outputs for r in finals)


def test_one_response_endpoints_refuse_a_decoupled_model(served: ServerProcess) -> None:
    arrays = {"IN": np.array([1], np.int32)}
    with httpclient.InferenceServerClient(served.http_address) as client, pytest.raises(
        InferenceServerException, match="support models with decoupled transaction policy"
    ) as http_error:  # fmt: skip
        client.infer("repeat", _http_inputs(arrays))
    assert http_error.value.status() == "501"
    with grpcclient.InferenceServerClient(served.grpc_address) as client, pytest.raises(
        InferenceServerException, match="ModelStreamInfer"
    ) as grpc_error:  # fmt: skip
        client.infer("repeat", _http_inputs(arrays, grpcclient))
    assert grpc_error.value.status() == "StatusCode.UNIMPLEMENTED"


def test_a_default_model_on_the_stream_sends_one_final_response(served: ServerProcess) -> None:
    got: queue.Queue[Any] = queue.Queue()
    arrays, a, b = _add_sub_inputs()
    with grpcclient.InferenceServerClient(served.grpc_address) as client:
        client.start_stream(callback=lambda result, error: got.put(error or result))
        try:
            client.async_stream_infer("add_sub", _http_inputs(arrays, grpcclient), request_id="r1")
            result = got.get(timeout=WAIT_S)
        finally:
            client.stop_stream()
    assert _final(result) and result.get_response().id == "r1"
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b)


def test_bls_reads_every_response_of_a_decoupled_model(served: ServerProcess) -> None:
    with httpclient.InferenceServerClient(served.http_address) as client:
        for values in ([4, 2, 0, 1], []):
            result = client.infer("bls_decoupled", _http_inputs({"IN": np.array(values, np.int32)}))
            assert result.as_numpy("SUM").tolist() == [sum(values)] and result.as_numpy("COUNT").tolist() == [len(values)]


def test_custom_metrics_of_every_instance_reach_metrics(served: ServerProcess) -> None:
    with httpclient.InferenceServerClient(served.http_address) as client:
        for value in (0.5, 5.0, 50.0):
            client.infer("metered", _http_inputs({"INPUT": np.array([value], np.float32)}))
    text = httpx.get(f"{served.metrics_url}/metrics", timeout=10).text
    labels = 'model="metered",version="1"'
    assert "# HELP it_requests_seen Requests seen by the model\n# TYPE it_requests_seen counter\n" in text
    assert f"it_requests_seen{{{labels}}} 3.0" in text  # two instances, one counter
    assert "# TYPE it_last_value gauge" in text and f"it_last_value{{{labels}}} 50.0" in text
    assert f'it_value_size_bucket{{le="10.0",{labels}}} 2.0' in text and f"it_value_size_count{{{labels}}} 3.0" in text


def test_auto_complete_config_serves_a_model_without_config_pbtxt(served: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(served.grpc_address) as client:
        config = client.get_model_config("auto").config
        assert config.max_batch_size == 4 and config.HasField("dynamic_batching")
        assert [(t.name, list(t.dims)) for t in config.input] == [("INPUT", [4])]
        assert [(t.name, list(t.dims)) for t in config.output] == [("OUTPUT", [4])]
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        assert client.infer("auto", _http_inputs({"INPUT": x}, grpcclient)).as_numpy("OUTPUT").tolist() == (x * 2).tolist()


@pytest.mark.parametrize("code", [*CODES, "(default)"])
def test_triton_error_codes_become_tritons_statuses(served: ServerProcess, code: str) -> None:
    arrays = {"ERROR_CODE": np.array([[code.encode()]], dtype=object)}
    expected = f"error code: {code}" if code in CODES else f"unrecognized error code: {code}"
    with grpcclient.InferenceServerClient(served.grpc_address) as client, pytest.raises(InferenceServerException) as err:
        client.infer("error_code", _http_inputs(arrays, grpcclient))
    assert str(err.value) == f"[StatusCode.{GRPC_STATUS.get(code, 'INTERNAL')}] {expected}"
    with httpclient.InferenceServerClient(served.http_address) as client, pytest.raises(InferenceServerException) as err:
        client.infer("error_code", _http_inputs(arrays))
    assert err.value.status() == str(HTTP_STATUS.get(code, 500)) and err.value.message() == expected
