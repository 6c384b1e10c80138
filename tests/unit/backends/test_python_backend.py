"""PythonBackend: user model.py life cycle, per-request results and errors, BYTES, Triton-style models."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from harness.backends import context
from harness.models import auto_complete_py, write_python_model
from servelab.backends.python import PythonBackend
from servelab.errors import InternalError, InvalidArgument, ServelabError
from servelab.protocol import model_config_pb2 as mc

ECHO = """
import json
import numpy as np
from servelab.backends.python_api import InvalidArgument

class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        self.config = json.loads(args["model_config"])
        self.finalized = []

    def execute(self, requests):
        out = []
        for r in requests:
            x = r.get("IN")
            if x.dtype != object and x.size and (x == 13).any():
                out.append(InvalidArgument("13 is unlucky"))
            elif x.dtype != object and x.size and (x == 7).any():
                out.append(ValueError("seven"))
            else:
                out.append({"OUT": x, "ROWS": np.full((len(x), 1), len(x), dtype=np.int64)})
        return out

    def finalize(self):
        self.finalized.append(True)
"""


def _backend(tmp_path: Path, source: str, config: mc.ModelConfig | None = None) -> PythonBackend:
    version_dir = write_python_model(tmp_path / "echo", textwrap.dedent(source)).parent
    if config is None:
        config = mc.ModelConfig(name="echo", backend="python", max_batch_size=8)
        config.input.add(name="IN", data_type=mc.TYPE_STRING, dims=[-1])
        config.output.add(name="OUT", data_type=mc.TYPE_STRING, dims=[-1])
        config.output.add(name="ROWS", data_type=mc.TYPE_INT64, dims=[1])
    backend = PythonBackend(context(config, version_dir, name="echo"))
    backend.load()
    return backend


def test_initialize_gets_triton_style_args(tmp_path: Path) -> None:
    backend = _backend(tmp_path, ECHO)
    args = backend.model.args
    assert args["model_name"] == "echo" and args["model_version"] == "1"
    assert args["model_repository"] == str(tmp_path / "echo") and args["model_instance_kind"] == "CPU"
    assert json.loads(args["model_config"])["input"][0]["name"] == "IN"
    model = backend.model
    backend.unload()
    assert model.finalized == [True] and backend.model is None


def test_bytes_echo(tmp_path: Path) -> None:
    backend = _backend(tmp_path, ECHO)
    x = np.array([[b"hello", b"\x00\xff"], [b"", "\u00e9".encode()]], dtype=object)
    out = backend.infer({"IN": x})
    assert out["OUT"].dtype == object and out["OUT"].tolist() == x.tolist()


@pytest.mark.parametrize(
    "dtype",
    [
        "bool",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "int8",
        "int16",
        "int32",
        "int64",
        "float16",
        "float32",
        "float64",
    ],
)
def test_numeric_echo(tmp_path: Path, dtype: str) -> None:
    x = (np.arange(6).reshape(3, 2) % 2).astype(dtype)
    out = _backend(tmp_path, ECHO).infer({"IN": x})["OUT"]
    assert out.dtype == x.dtype and out.tobytes() == x.tobytes()


def test_each_request_gets_its_rows_and_errors_fail_alone(tmp_path: Path) -> None:
    backend = _backend(tmp_path, ECHO)
    reqs = [{"IN": np.arange(n, dtype=np.int32).reshape(n, 1) + 20} for n in (1, 3, 5)]
    reqs.insert(1, {"IN": np.array([[13]], dtype=np.int32)})
    reqs.append({"IN": np.array([[7], [8]], dtype=np.int32)})
    results = backend.execute(reqs)
    assert [r["ROWS"][0, 0] for r in results if isinstance(r, dict)] == [1, 3, 5]
    assert isinstance(results[1], InvalidArgument) and results[1].message == "13 is unlucky"
    assert (
        isinstance(results[4], InternalError)
        and "echo" in results[4].message
        and "seven" in results[4].message
    )
    np.testing.assert_array_equal(results[3]["OUT"], reqs[3]["IN"])  # type: ignore[index]
    with pytest.raises(InvalidArgument, match="unlucky"):
        backend.infer({"IN": np.array([[13]], dtype=np.int32)})


def test_exception_in_execute_fails_every_request(tmp_path: Path) -> None:
    source = "class Model:\n    def execute(self, requests):\n        raise RuntimeError('boom')\n"
    results = _backend(tmp_path, source).execute([{"IN": np.zeros((1, 1))}, {"IN": np.zeros((2, 1))}])
    assert all(
        isinstance(r, InternalError) and "python model 'echo'" in r.message and "boom" in r.message
        for r in results
    )


def test_wrong_result_count_and_missing_output(tmp_path: Path) -> None:
    source = "class Model:\n    def execute(self, requests):\n        return [{'OUT': r.get('IN')} for r in requests][:1]\n"
    backend = _backend(tmp_path, source)
    results = backend.execute([{"IN": np.zeros((1, 1))}, {"IN": np.zeros((1, 1))}])
    assert all(isinstance(r, InternalError) and "list of 2 items, got 1 items" in r.message for r in results)
    missing = backend.execute([{"IN": np.zeros((1, 1))}])[0]
    assert isinstance(missing, InternalError) and "did not return outputs ['ROWS']" in missing.message


def test_triton_pb_utils_style_model(tmp_path: Path) -> None:
    source = """
    import numpy as np
    import servelab.backends.python_api as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
                if x.sum() < 0:
                    responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("negative")))
                    continue
                out = pb_utils.Tensor("OUT", x * 2)
                rows = pb_utils.Tensor("ROWS", np.array([["a"]] * len(x)))
                responses.append(pb_utils.InferenceResponse(output_tensors=[out, rows]))
            return responses
    """
    backend = _backend(tmp_path, source)
    ok, bad = backend.execute([{"IN": np.ones((2, 1), dtype=np.float32)}, {"IN": -np.ones((1, 1))}])
    assert isinstance(ok, dict) and ok["OUT"].tolist() == [[2.0], [2.0]]
    assert ok["ROWS"].dtype == object and ok["ROWS"].tolist() == [[b"a"], [b"a"]]  # str arrays become bytes
    assert isinstance(bad, InternalError) and bad.message == "negative"


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("x = 1\n", "defines neither class TritonPythonModel nor Model"),
        ("import no_such_module_here\n", "importing .*model.py for model 'echo' failed.*no_such_module_here"),
        (
            "class Model:\n    def initialize(self, args):\n        raise KeyError('k')\n",
            r"initialize\(\) of model 'echo' failed",
        ),
    ],
)
def test_broken_model_files_fail_load_clearly(tmp_path: Path, source: str, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        _backend(tmp_path, source)


# ----- Triton's API: args, async execute, senders, decoupled models, auto-complete -----
def _config_of(text: str) -> mc.ModelConfig:
    from google.protobuf import text_format

    return text_format.Parse(text, mc.ModelConfig())


ARGS_MODEL = """
import json
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        self.config = json.loads(args["model_config"])

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
                for r in requests]
"""


def test_model_config_reaches_initialize_as_tritons_json(tmp_path: Path) -> None:
    config = _config_of('name: "echo" backend: "python" input [{ name: "IN" data_type: TYPE_INT32 dims: [1] }] '
                        'output [{ name: "OUT" data_type: TYPE_INT32 dims: [1] }] '
                        'parameters { key: "k" value { string_value: "v" } }')  # fmt: skip
    backend = _backend(tmp_path, ARGS_MODEL, config)
    seen = backend.model.config
    assert seen["input"][0]["dims"] == [1] and seen["max_batch_size"] == 0 and seen["output"][0]["name"] == "OUT"
    assert seen["parameters"] == {"k": {"string_value": "v"}} and seen["instance_group"] == []
    assert set(backend.model.args) == {"model_config", "model_name", "model_version", "model_repository",
                                       "model_instance_kind", "model_instance_name", "model_instance_device_id"}


ASYNC_MODEL = """
import asyncio
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    async def execute(self, requests):
        await asyncio.sleep(0)
        responses = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            if x.size and x.reshape(-1)[0] < 0:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("negative", pb_utils.TritonError.INVALID_ARG)))
                continue
            out = pb_utils.Tensor("OUT", x)
            rows = pb_utils.Tensor("ROWS", np.full((len(x), 1), len(x), np.int64))
            responses.append(pb_utils.InferenceResponse([out, rows]))
        return responses
"""


def test_async_execute_runs_on_the_instances_loop(tmp_path: Path) -> None:
    backend = _backend(tmp_path, "import numpy as np\n" + ASYNC_MODEL)
    ok, bad = backend.execute([{"IN": np.ones((2, 1), np.float32)}, {"IN": -np.ones((1, 1), np.float32)}])
    assert isinstance(ok, dict) and ok["ROWS"].tolist() == [[2], [2]]
    assert isinstance(bad, InvalidArgument) and bad.message == "negative"
    backend.unload()


SENDER_MODEL = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            out = pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())
            rows = pb_utils.Tensor("ROWS", np.ones((1, 1), np.int64))
            r.get_response_sender().send(pb_utils.InferenceResponse([out, rows]),
                                         flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def test_a_default_model_may_answer_through_its_senders(tmp_path: Path) -> None:
    backend = _backend(tmp_path, "import numpy as np\n" + SENDER_MODEL)
    (result,) = backend.execute([{"IN": np.array([[5]], np.int32)}])
    assert isinstance(result, dict) and result["OUT"].tolist() == [[5]]


DECOUPLED_CONFIG = ('name: "echo" backend: "python" model_transaction_policy { decoupled: true } '
                    'input [{ name: "IN" data_type: TYPE_INT32 dims: [1] }] '
                    'output [{ name: "OUT" data_type: TYPE_INT32 dims: [1] }]')  # fmt: skip
DECOUPLED_MODEL = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.release = threading.Event()
        self.threads = []

    def execute(self, requests):
        for r in requests:
            n = int(pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()[0])
            if n < 0:
                raise pb_utils.TritonModelException("n must be >= 0")
            sender = r.get_response_sender()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([0], np.int32))]))
            t = threading.Thread(target=self.rest, args=(sender, n))
            t.start()
            self.threads.append(t)
        return None

    def rest(self, sender, n):
        self.release.wait(30)
        for i in range(1, n):
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], np.int32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        self.release.set()
        for t in self.threads:
            t.join()
"""


def test_a_decoupled_model_keeps_sending_after_execute_returns(tmp_path: Path) -> None:
    from servelab.backends.base import StreamItem, StreamRequest

    backend = _backend(tmp_path, DECOUPLED_MODEL, _config_of(DECOUPLED_CONFIG))
    got: list[tuple[int, StreamItem]] = []
    executed = backend.execute_stream([StreamRequest({"IN": np.array([3], np.int32)})], lambda i, item: got.append((i, item)))
    assert executed.results == [] and [item.outputs["OUT"].tolist() for _, item in got if item.outputs] == [[0]]
    backend.model.release.set()
    backend.unload()  # finalize joins the sending thread
    assert [(i, item.outputs["OUT"].tolist() if item.outputs else None, item.final) for i, item in got] == [
        (0, [0], False), (0, [1], False), (0, [2], False), (0, None, True)]  # fmt: skip


def test_a_decoupled_models_failure_is_the_final_response_of_its_open_requests(tmp_path: Path) -> None:
    from servelab.backends.base import StreamItem, StreamRequest

    backend = _backend(tmp_path, DECOUPLED_MODEL, _config_of(DECOUPLED_CONFIG))
    got: list[StreamItem] = []
    backend.execute_stream([StreamRequest({"IN": np.array([-1], np.int32)})], lambda i, item: got.append(item))
    assert len(got) == 1 and got[0].final and isinstance(got[0].error, InternalError)
    assert "TritonModelException: n must be >= 0" in got[0].error.message
    (refused,) = backend.execute([{"IN": np.array([2], np.int32)}])
    assert isinstance(refused, ServelabError) and "decoupled transaction policy" in refused.message
    backend.unload()


def test_auto_complete_config_fills_a_missing_config(tmp_path: Path) -> None:
    version_dir = write_python_model(tmp_path / "auto", auto_complete_py(("IN", "OUT"), 8)).parent
    config = mc.ModelConfig(name="auto", backend="python", default_model_filename="model.py")
    PythonBackend.autocomplete(config, version_dir)
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [("IN", mc.TYPE_FP32, [4])]
    assert [t.name for t in config.output] == ["OUT"] and config.max_batch_size == 8
    assert config.HasField("dynamic_batching") and not config.HasField("model_transaction_policy")
    assert config.name == "auto" and config.backend == "python"


def test_auto_complete_config_errors_fail_the_load_with_the_models_message(tmp_path: Path) -> None:
    source = auto_complete_py(("IN", "OUT")).replace(
        "auto_complete_model_config.set_max_batch_size(4)",
        'auto_complete_model_config.add_input({"name": "IN", "data_type": "TYPE_INT8", "dims": [4]})')
    version_dir = write_python_model(tmp_path / "auto", source).parent
    config = mc.ModelConfig(name="auto", backend="python", default_model_filename="model.py")
    with pytest.raises(InvalidArgument, match="auto_complete_config failed: ValueError: .*expects datatype TYPE_FP32"):
        PythonBackend.autocomplete(config, version_dir)


def test_models_without_auto_complete_are_not_imported_to_complete_them(tmp_path: Path) -> None:
    version_dir = write_python_model(tmp_path / "plain", "raise SystemExit('imported!')\n").parent
    config = mc.ModelConfig(name="plain", backend="python", default_model_filename="model.py")
    PythonBackend.autocomplete(config, version_dir)
    assert not config.input
