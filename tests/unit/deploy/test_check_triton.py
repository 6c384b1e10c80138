"""servelab check-triton: each model's verdict and the change it names."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.deploy.triton_check import Verdict, check_repository

PB_UTILS_MODEL = "import triton_python_backend_utils as pb_utils\n\nclass TritonPythonModel:\n    pass\n"
DICT_MODEL = "class TritonPythonModel:\n    def execute(self, requests):\n        return [{'Y': r.inputs['X']} for r in requests]\n"


def _model(root: Path, name: str, config: str | None, files: dict[str, str]) -> None:
    (root / name / "1").mkdir(parents=True)
    for filename, text in files.items():
        (root / name / "1" / filename).write_text(text)
    if config is not None:
        (root / name / "config.pbtxt").write_text(f'name: "{name}"\n{config}')


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    io = 'input [ { name: "X", data_type: TYPE_FP32, dims: [4] } ]\noutput [ { name: "Y", data_type: TYPE_FP32, dims: [4] } ]\n'
    torch_io = 'input [ { name: "INPUT__0", data_type: TYPE_FP32, dims: [4] } ]\noutput [ { name: "OUTPUT__0", data_type: TYPE_FP32, dims: [4] } ]\n'
    _model(tmp_path, "onnx_bare", None, {"model.onnx": ""})
    _model(tmp_path, "onnx_ours", 'platform: "onnxruntime_onnx"\nparameters { key: "instance_mode" value { string_value: "thread" } }\n', {"model.onnx": ""})
    _model(tmp_path, "ts_good", 'platform: "pytorch_libtorch"\n' + torch_io, {"model.pt": ""})
    _model(tmp_path, "ts_names", 'platform: "pytorch_libtorch"\n' + io, {"model.pt": ""})
    _model(tmp_path, "ts_bare", None, {"model.pt": ""})
    _model(tmp_path, "exported", 'platform: "torch_export"\n' + io, {"model.pt2": ""})
    _model(tmp_path, "custom", 'backend: "mypkg.mod:Backend"\n' + io, {})
    _model(tmp_path, "plugin", 'backend: "graphsage"\n' + io, {})
    _model(tmp_path, "py_triton", 'backend: "python"\n' + io, {"model.py": PB_UTILS_MODEL})
    _model(tmp_path, "py_dict", 'backend: "python"\n' + io, {"model.py": DICT_MODEL})
    steps = 'ensemble_scheduling { step [ { model_name: "py_dict" model_version: -1 } ] }\n'
    _model(tmp_path, "chain", 'platform: "ensemble"\n' + io + steps, {})
    (tmp_path / "noversions").mkdir()
    (tmp_path / "noversions" / "config.pbtxt").write_text('name: "noversions"\nplatform: "onnxruntime_onnx"\n')
    return tmp_path


def test_verdicts(repo: Path) -> None:
    got = {v.name: v for v in check_repository([repo])}
    verdicts = {name: v.verdict for name, v in got.items()}
    assert verdicts == {
        "onnx_bare": Verdict.OK, "onnx_ours": Verdict.NOTE, "ts_good": Verdict.OK, "ts_names": Verdict.CHANGE,
        "ts_bare": Verdict.CHANGE, "exported": Verdict.CHANGE, "custom": Verdict.CHANGE, "plugin": Verdict.CHANGE,
        "py_triton": Verdict.OK, "py_dict": Verdict.CHANGE, "chain": Verdict.CHANGE, "noversions": Verdict.CHANGE,
    }  # fmt: skip
    assert "instance_mode" in got["onnx_ours"].notes[0]
    assert "OUTPUT__0" in got["ts_names"].notes[0]
    assert "pytorch_libtorch" in got["exported"].notes[0]
    assert "pb_utils" in got["py_dict"].notes[0]
    assert "py_dict" in got["chain"].notes[0]
    assert "cannot auto-complete" in got["ts_bare"].notes[0]


def test_the_command_exits_1_when_something_must_change(repo: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["check-triton", str(repo)])
    assert result.exit_code == 1 and "py_dict" in result.output
    clean = tmp_path / "clean"
    _model(clean, "only", 'platform: "onnxruntime_onnx"\n', {"model.onnx": ""})
    assert CliRunner().invoke(app, ["check-triton", str(clean)]).exit_code == 0
    assert CliRunner().invoke(app, ["check-triton", str(tmp_path / "missing")]).exit_code == 2
