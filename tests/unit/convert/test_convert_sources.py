"""servelab convert on tiny models of every SOURCE kind: each artefact goes through the parity gate of the
backend that serves it, and bad artefacts are caught with their figures."""

from __future__ import annotations

import json
import pickle
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from servelab.convert.parity import parse_tolerances
from servelab.convert.pipeline import ConvertResult, ConvertSpec, convert
from servelab.convert.sources import parse_input_option
from servelab.errors import InvalidArgument
from servelab.repository import ModelRepository

FACTORY = textwrap.dedent(
    """
    import torch

    input_names = ["x"]
    output_names = ["scores"]
    task = "classifier"

    def make_model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))

    def example_inputs():
        return torch.zeros(2, 8)
    """
)


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).eval()


def _by(result: ConvertResult) -> dict[tuple[str, str], object]:
    return {(a.target, a.precision): a for a in result.artefacts}


def _status(result: ConvertResult) -> dict[tuple[str, str], str]:
    return {(a.target, a.precision): a.status for a in result.artefacts}


def test_module_factory_to_every_cpu_target(tmp_path: Path) -> None:
    src = tmp_path / "net.py"
    src.write_text(FACTORY)
    out = tmp_path / "repo"
    result = convert(ConvertSpec(
        source=str(src), out=out, targets=("onnx", "openvino", "torchscript", "torch_export", "tensorrt"),
        precisions=("fp32", "int8"), parity_samples=32,
    ))  # fmt: skip
    status = _status(result)
    for target in ("onnx", "openvino", "torchscript", "torch_export"):
        assert status[(target, "fp32")] == "accepted", result.artefacts
    assert status[("onnx", "int8")] == "accepted" and status[("torchscript", "int8")] == "accepted"
    assert status[("tensorrt", "fp32")] == "skipped" and "TensorRT" in _by(result)[("tensorrt", "fp32")].reason  # type: ignore[attr-defined]
    fp32 = _by(result)[("onnx", "fp32")]
    assert fp32.parity.passed and fp32.parity.outputs[0].top1_agreement == 1.0  # type: ignore[attr-defined]
    assert result.onnx is not None and result.onnx.opset >= 13
    # the repository serves every accepted artefact: its configs read back and auto-complete cleanly
    repo = ModelRepository(out)
    accepted = {a.model for a in result.accepted()}
    assert set(repo.model_names()) == accepted
    for name in accepted:
        source = repo.read(name)
        assert [t.name for t in source.config.input] == ["x"] and source.config.max_batch_size == 32
    manifest = json.loads((out / "net.convert.json").read_text())
    assert {a["status"] for a in manifest["artefacts"]} == {"accepted", "skipped"}


def test_torchscript_and_torch_export_files(tmp_path: Path) -> None:
    module, x = _mlp(), torch.zeros(2, 8)
    ts = tmp_path / "m.pt"
    torch.jit.save(torch.jit.trace(module, x), str(ts))
    with pytest.raises(InvalidArgument, match="--input"):
        convert(ConvertSpec(source=str(ts), out=tmp_path / "no"))
    result = convert(ConvertSpec(
        source=str(ts), out=tmp_path / "ts", targets=("onnx", "torchscript"), inputs=[parse_input_option("INPUT__0:FP32:8")],
    ))  # fmt: skip
    assert set(_status(result).values()) == {"accepted"}
    program = torch.export.export(module, (torch.zeros(4, 8),), dynamic_shapes=({0: torch.export.Dim("b", min=1)},))
    pt2 = tmp_path / "m.pt2"
    torch.export.save(program, str(pt2))
    result = convert(ConvertSpec(source=str(pt2), out=tmp_path / "pt2", targets=("onnx", "openvino")))
    assert set(_status(result).values()) == {"accepted"}
    assert [t.name for t in result.inputs] == ["INPUT__0"] and result.outputs[0].dims == (3,)


def test_onnx_file_fp16_and_a_target_it_cannot_become(tmp_path: Path) -> None:
    from servelab.convert.export import export_onnx

    onnx_path = export_onnx(_mlp(), torch.zeros(2, 8), tmp_path / "m.onnx", ["x"], ["y"])
    result = convert(ConvertSpec(
        source=str(onnx_path), out=tmp_path / "repo", targets=("onnx", "openvino", "torchscript"), precisions=("fp32", "fp16"),
    ))  # fmt: skip
    status = _status(result)
    assert status[("onnx", "fp32")] == status[("onnx", "fp16")] == status[("openvino", "fp16")] == "accepted"
    fp16 = _by(result)[("onnx", "fp16")].parity  # type: ignore[attr-defined]
    assert 0 < fp16.outputs[0].max_rel_error < 2e-2
    assert status[("torchscript", "fp32")] == "skipped"
    assert "no torch module" in _by(result)[("torchscript", "fp32")].reason  # type: ignore[attr-defined]


def test_scikit_learn_classifier_and_lightgbm_regressor(tmp_path: Path) -> None:
    lightgbm = pytest.importorskip("lightgbm")
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x = rng.standard_normal((400, 6)).astype(np.float32)
    clf = LogisticRegression().fit(x, (x[:, 0] + x[:, 1] > 0).astype(int))
    (tmp_path / "clf.pkl").write_bytes(pickle.dumps(clf))
    result = convert(ConvertSpec(source=str(tmp_path / "clf.pkl"), out=tmp_path / "clf", targets=("onnx",)))
    art = result.artefacts[0]
    assert art.status == "accepted" and result.source.task == "classifier"
    assert [o.name for o in art.parity.outputs] == ["label", "probabilities"]  # type: ignore[union-attr]
    assert art.parity.outputs[0].exact_agreement == 1.0  # type: ignore[union-attr]

    reg = lightgbm.LGBMRegressor(n_estimators=10, verbose=-1).fit(x, x[:, 0] * 100 + x[:, 2] ** 2)
    (tmp_path / "reg.pkl").write_bytes(pickle.dumps(reg))
    result = convert(ConvertSpec(
        source=str(tmp_path / "reg.pkl"), out=tmp_path / "reg", targets=("onnx", "openvino"), precisions=("fp32", "fp16", "int8"),
    ))  # fmt: skip
    status = _status(result)
    assert status[("onnx", "fp32")] == "accepted"
    assert result.onnx is not None and result.onnx.tried and "opset" in result.onnx.describe()  # newer opsets refused
    # precisions and runtimes a tree ensemble cannot take are reported as such, not copied under another name
    assert status[("onnx", "fp16")] == status[("onnx", "int8")] == "skipped"
    assert "fp16" in _by(result)[("onnx", "fp16")].reason  # type: ignore[attr-defined]
    assert "TreeEnsemble" in _by(result)[("openvino", "fp32")].reason  # type: ignore[attr-defined]


def test_xgboost_booster(tmp_path: Path) -> None:
    xgboost = pytest.importorskip("xgboost")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 5)).astype(np.float32)
    booster = xgboost.train({"objective": "reg:squarederror"}, xgboost.DMatrix(x, label=x[:, 0]), num_boost_round=5)
    booster.save_model(str(tmp_path / "m.json"))
    result = convert(ConvertSpec(source=str(tmp_path / "m.json"), out=tmp_path / "repo", targets=("onnx",)))
    assert result.artefacts[0].status == "accepted"


def test_int8_calibrated_on_too_few_samples_is_rejected(tmp_path: Path) -> None:
    """Calibrated on one small sample, the activation ranges are far too narrow for real inputs: caught."""
    src = tmp_path / "net.py"
    src.write_text(FACTORY.replace('task = "classifier"', 'task = "other"'))
    rng = np.random.default_rng(1)
    data = rng.normal(0, 10, (64, 8)).astype(np.float32)
    np.savez(tmp_path / "data.npz", x=data)
    np.savez(tmp_path / "calib.npz", x=np.full((1, 8), 0.01, dtype=np.float32))
    good = convert(ConvertSpec(source=str(src), out=tmp_path / "good", targets=("onnx",), precisions=("int8-static",),
                               data=tmp_path / "data.npz"))  # fmt: skip
    assert good.artefacts[0].status == "accepted", good.artefacts[0].reason
    out = tmp_path / "bad"
    bad = convert(ConvertSpec(source=str(src), out=out, targets=("onnx",), precisions=("int8-static",),
                              data=tmp_path / "data.npz", calibration=tmp_path / "calib.npz", calibration_samples=1))  # fmt: skip
    art = bad.artefacts[0]
    assert art.status == "rejected"
    assert "relative error" in art.reason and "calibrated on 1 samples" in art.reason
    assert art.parity is not None and art.parity.outputs[0].max_rel_error > 0.1
    assert art.folder == out / "_rejected" / art.model and not (out / art.model).exists()
    assert ModelRepository(out).model_names() == []  # a rejected artefact is never served


def test_a_precision_the_model_cannot_take_is_rejected(tmp_path: Path) -> None:
    """Values past fp16's range (65,504) cannot be held in fp16: the artefact is far off and the gate says so."""
    src = tmp_path / "big.py"
    src.write_text(textwrap.dedent(
        """
        import torch

        class Big(torch.nn.Module):
            def __init__(self):
                super().__init__()
                torch.manual_seed(0)
                self.lin = torch.nn.Linear(4, 2)

            def forward(self, x):
                return self.lin(x * 1.0e5)

        def make_model():
            return Big()

        def example_inputs():
            return torch.zeros(2, 4)
        """
    ))  # fmt: skip
    result = convert(ConvertSpec(source=str(src), out=tmp_path / "repo", targets=("onnx",), precisions=("fp32", "fp16")))
    status = _status(result)
    assert status[("onnx", "fp32")] == "accepted" and status[("onnx", "fp16")] == "rejected"
    reason = _by(result)[("onnx", "fp16")].reason  # type: ignore[attr-defined]
    assert "overflow" in reason or "relative error" in reason, reason


def test_options_are_checked() -> None:
    with pytest.raises(InvalidArgument, match="--to"):
        ConvertSpec(source="x.onnx", out=Path("o"), targets=("tflite",))
    with pytest.raises(InvalidArgument, match="--precision"):
        ConvertSpec(source="x.onnx", out=Path("o"), precisions=("int4",))
    with pytest.raises(InvalidArgument, match="NAME:DTYPE"):
        parse_input_option("x:16")
    assert parse_tolerances(["int8=0.05/0.95"])["int8"].min_top1 == 0.95
    with pytest.raises(InvalidArgument, match="--tolerance"):
        parse_tolerances(["int4=0.1"])
