"""PythonBackend: user model.py life cycle, per-request results and errors, BYTES, Triton-style models."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from harness.backends import context
from harness.models import write_python_model
from servelab.backends.python import PythonBackend
from servelab.errors import InternalError, InvalidArgument
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
