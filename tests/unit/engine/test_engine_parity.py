"""One MLP exported to ONNX, TorchScript, torch.export and OpenVINO IR: equal to torch eager through the Engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.backends import MLP_IN, MLP_OUT, assert_like_eager, export_mlp, mlp_rows
from harness.models import IO
from harness.repository import model_config, write_config

pytest.importorskip("torch")
pytest.importorskip("openvino")

from servelab import Engine

#: model name -> (export format, config.pbtxt; the torch.export one is auto-completed from the program)
FORMATS = {
    "mlp_onnx": ("onnx", ""),
    "mlp_torchscript": ("torchscript", ""),
    "mlp_export": ("torch_export", None),
    "mlp_openvino": ("openvino", 'backend: "openvino"'),
}


@pytest.fixture(scope="module")
def mlp_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("mlps")
    for name, (fmt, runtime) in FORMATS.items():
        export_mlp(fmt, repo / name / "1", io=IO)
        if runtime is None:
            write_config(repo / name, "max_batch_size: 32\n")
            continue
        i, o = ("INPUT__0", "OUTPUT__0") if fmt == "torchscript" else IO
        write_config(repo / name, model_config(name, runtime, [(i, "FP32", [MLP_IN])], [(o, "FP32", [MLP_OUT])], max_batch_size=32))
    return repo


@pytest.mark.parametrize("batch", [1, 32])
def test_every_format_matches_torch_eager(mlp_repo: Path, batch: int) -> None:
    x = mlp_rows(batch, seed=batch)
    with Engine(mlp_repo) as engine:
        for name in FORMATS:
            meta = engine.get_model_metadata(name)
            (inp,), (out,) = meta["inputs"], meta["outputs"]
            got = engine.infer(name, {inp["name"]: x})[out["name"]]
            assert got.shape == (batch, MLP_OUT), name
            assert_like_eager(got, x)
