"""One MLP exported to ONNX, TorchScript, torch.export and OpenVINO IR: equal to torch eager through the Engine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from engine_models import write_config

torch = pytest.importorskip("torch")
pytest.importorskip("openvino")

from servelab import Engine  # noqa: E402
from servelab.convert.export import (  # noqa: E402
    export_onnx,
    export_openvino,
    export_torch_program,
    export_torchscript,
)

FORMATS = ("mlp_onnx", "mlp_torchscript", "mlp_export", "mlp_openvino")


@pytest.fixture(scope="module")
def mlp_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()
    repo = tmp_path_factory.mktemp("mlps")
    example = (torch.randn(1, 16),)
    export_onnx(mlp, example, repo / "mlp_onnx/1/model.onnx", ["INPUT"], ["OUTPUT"])
    export_openvino(repo / "mlp_onnx/1/model.onnx", repo / "mlp_openvino/1/model.xml")
    export_torchscript(mlp, example, repo / "mlp_torchscript/1/model.pt")
    export_torch_program(mlp, example, repo / "mlp_export/1/model.pt2")
    io = (
        'max_batch_size: 32\ninput [ { name: "%s", data_type: TYPE_FP32, dims: [16] } ]\n'
        'output [ { name: "%s", data_type: TYPE_FP32, dims: [8] } ]\n'
    )
    write_config(repo / "mlp_onnx", io % ("INPUT", "OUTPUT"))
    write_config(repo / "mlp_openvino", 'backend: "openvino"\n' + io % ("INPUT", "OUTPUT"))
    write_config(repo / "mlp_torchscript", io % ("INPUT__0", "OUTPUT__0"))
    write_config(repo / "mlp_export", "max_batch_size: 32\n")  # auto-completed from the exported program
    return repo, mlp


@pytest.mark.parametrize("batch", [1, 32])
def test_every_format_matches_torch_eager(mlp_repo: tuple[Path, torch.nn.Module], batch: int) -> None:
    repo, mlp = mlp_repo
    x = np.random.default_rng(batch).standard_normal((batch, 16), dtype=np.float32)
    with torch.no_grad():
        expected = mlp(torch.from_numpy(x)).numpy()
    with Engine(repo) as engine:
        for name in FORMATS:
            meta = engine.get_model_metadata(name)
            (inp,), (out,) = meta["inputs"], meta["outputs"]
            got = engine.infer(name, {inp["name"]: x})[out["name"]]
            assert got.shape == (batch, 8), name
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5, err_msg=name)
