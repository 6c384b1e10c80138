"""model_warmup: every instance runs the samples before its version is ready; a failing sample fails the
load naming sample and instance; data is zeros, random or the raw bytes of <model>/warmup/<file>. The
model (python backend, in its worker processes) appends what each execution received to calls.jsonl."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from harness.repository import python_model
from servelab import Engine
from servelab.errors import InvalidArgument, Unavailable
from servelab.repository import ModelRepository

RECORDING_PY = """\
import json
import os


class TritonPythonModel:
    def initialize(self, args):
        self.log = os.path.join(args["model_repository"], "calls.jsonl")

    def execute(self, requests):
        with open(self.log, "a") as f:
            f.write(json.dumps([{k: v.tolist() for k, v in r.inputs.items()} for r in requests]) + "\\n")
        if any(float(r.inputs["INPUT"].reshape(-1)[0]) < 0 for r in requests):
            raise ValueError("negative input")
        return [{"OUTPUT": r.inputs["INPUT"].reshape(len(r.inputs["INPUT"]), 4)} for r in requests]
"""


def _model(repo: Path, warmup: str, instances: int = 1, reshape: str = "") -> Path:
    extra = f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\nmodel_warmup [ {warmup} ]\n"
    d = python_model(repo, "w", RECORDING_PY, "FP32", [4], max_batch_size=4, extra=extra)
    if reshape:
        text = (d / "config.pbtxt").read_text().replace("dims: [4] }", "dims: [2, 2], reshape: { shape: [4] } }", 1)
        (d / "config.pbtxt").write_text(text)
    return d


def _calls(d: Path) -> list[list[dict[str, list]]]:
    path = d / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _sample(inputs: str, batch_size: int = 1, count: int = 0, name: str = "s") -> str:
    return f'{{ name: "{name}" batch_size: {batch_size} count: {count} inputs {inputs} }}'


ZEROS = '{ key: "INPUT" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }'


def test_every_instance_runs_the_samples_before_the_model_is_ready(tmp_path: Path) -> None:
    d = _model(tmp_path, _sample(ZEROS, batch_size=3, count=2), instances=2)
    with Engine(tmp_path) as engine:
        calls = _calls(d)
        assert len(calls) == 4  # 2 instances x count 2, before any request
        assert all(len(c) == 3 and c[0]["INPUT"] == [[0.0] * 4] for c in calls)  # batch_size copies of one row
        engine.infer("w", {"INPUT": np.ones((1, 4), np.float32)})
        assert len(_calls(d)) == 5


def test_data_from_a_file_in_the_warmup_folder(tmp_path: Path) -> None:
    inputs = '{ key: "INPUT" value: { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "four.bin" } }'
    d = _model(tmp_path, _sample(inputs))
    (d / "warmup").mkdir()
    (d / "warmup" / "four.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    with Engine(tmp_path):
        assert _calls(d)[0][0]["INPUT"] == [[0.0, 1.0, 2.0, 3.0]]


def test_dims_are_the_clients_and_reshape_applies(tmp_path: Path) -> None:
    inputs = '{ key: "INPUT" value: { data_type: TYPE_FP32 dims: [ 2, 2 ] random_data: true } }'
    d = _model(tmp_path, _sample(inputs), reshape="yes")
    with Engine(tmp_path):
        got = np.array(_calls(d)[0][0]["INPUT"])
    assert got.shape == (1, 4)  # sent as [2, 2], the model sees the reshape [4] (plus the batch row)


def test_a_failing_sample_fails_the_load_naming_it(tmp_path: Path) -> None:
    inputs = '{ key: "INPUT" value: { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "neg.bin" } }'
    d = _model(tmp_path, _sample(inputs, name="negative"))
    (d / "warmup").mkdir()
    (d / "warmup" / "neg.bin").write_bytes(np.full(4, -1, np.float32).tobytes())
    with Engine(tmp_path) as engine:
        record = engine.dataplane.registry.record("w")
        assert record.state.value == "UNAVAILABLE"
        assert "warm-up sample 'negative' failed on instance 0" in record.reason and "negative input" in record.reason
        with pytest.raises(Unavailable, match="warm-up sample 'negative' failed"):
            engine.dataplane.load_model("w")


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        (_sample('{ key: "OTHER" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }'),
         r"gives no data for input\(s\) \['INPUT'\]"),
        (_sample(ZEROS, batch_size=5), "batch_size 5 exceeds max_batch_size 4"),
        (_sample(ZEROS, batch_size=0), "batch_size must be >= 1"),
        (_sample('{ key: "INPUT" value: { data_type: TYPE_INT32 dims: [ 4 ] zero_data: true } }'),
         "data_type TYPE_INT32 but the input is TYPE_FP32"),
        (_sample('{ key: "INPUT" value: { data_type: TYPE_FP32 dims: [ 5 ] zero_data: true } }'),
         r"dims \[5\] do not fit the input's dims \[4\]"),
        (_sample('{ key: "INPUT" value: { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "none.bin" } }'),
         "input_data_file warmup/none.bin does not exist"),
        (_sample('{ key: "INPUT" value: { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "../../etc/passwd" } }'),
         "input_data_file"),
    ],
)
def test_bad_samples_fail_before_any_instance_loads(tmp_path: Path, sample: str, message: str) -> None:
    d = _model(tmp_path, sample)
    (d / "warmup").mkdir()
    with pytest.raises(InvalidArgument, match=message):
        ModelRepository(tmp_path).read("w")
    with Engine(tmp_path) as engine:
        assert re.search(message, engine.dataplane.registry.record("w").reason)
    assert _calls(d) == []  # no instance ran anything
