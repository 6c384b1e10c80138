"""TorchBackend: auto-complete, the probe and its error, BF16, execute (parity with torch eager:
test_mlp_every_runtime)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

from harness.backends import assert_like_eager, context, loaded, mlp_rows
from servelab.backends.torch import TorchBackend
from servelab.convert.export import export_torchscript
from servelab.errors import InvalidArgument, Unsupported
from servelab.protocol import model_config_pb2 as mc


class TwoHeads(torch.nn.Module):
    """(x, scale) -> (x * scale summed per row as float64, x cast to int32)."""

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (x * scale).sum(dim=1, keepdim=True).double(), x.to(torch.int32)


def _mlp_config(**kw: object) -> mc.ModelConfig:
    config = mc.ModelConfig(name="m", backend="pytorch", max_batch_size=32, **kw)  # type: ignore[arg-type]
    config.input.add(name="INPUT__0", data_type=mc.TYPE_FP32, dims=[16])
    return config


def _loaded(version_dir: Path, config: mc.ModelConfig) -> TorchBackend:
    return loaded(TorchBackend, version_dir, config)


def test_autocomplete_torch_export_renames_by_position_and_checks(program_dir: Path) -> None:
    config = _mlp_config()
    TorchBackend.autocomplete(config, program_dir)
    assert [t.name for t in config.input] == ["INPUT__0"] and config.max_batch_size == 32
    bad = _mlp_config()
    bad.input[0].data_type = mc.TYPE_INT64
    with pytest.raises(
        InvalidArgument, match="input 'INPUT__0': config data_type TYPE_INT64 but the model has TYPE_FP32"
    ):
        TorchBackend.autocomplete(bad, program_dir)


def test_torchscript_without_inputs_says_what_to_write(script_dir: Path) -> None:
    with pytest.raises(InvalidArgument) as info:
        TorchBackend.autocomplete(mc.ModelConfig(name="m"), script_dir)
    message = info.value.message
    assert "forward takes 1: input" in message
    assert 'input [ { name: "INPUT__0", data_type: TYPE_FP32, dims: [16] } ]' in message


def test_torchscript_probe_finds_outputs(tmp_path: Path) -> None:
    export_torchscript(TwoHeads(), (torch.zeros(2, 3), torch.ones(2, 3)), tmp_path / "model.pt")
    config = mc.ModelConfig(name="m", max_batch_size=8)
    config.input.add(name="X__0", data_type=mc.TYPE_FP32, dims=[-1])
    config.input.add(name="S__1", data_type=mc.TYPE_FP32, dims=[-1])
    backend = _loaded(tmp_path, config)
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [
        ("OUTPUT__0", mc.TYPE_FP64, [1]),
        ("OUTPUT__1", mc.TYPE_INT32, [-1]),
    ]
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
    out = backend.infer({"S__1": np.full_like(x, 2.0), "X__0": x})  # positions come from __N, not dict order
    np.testing.assert_array_equal(out["OUTPUT__0"], [[12.0], [30.0]])
    np.testing.assert_array_equal(out["OUTPUT__1"], x.astype(np.int32))


def test_inputs_follow_double_underscore_positions(tmp_path: Path) -> None:
    export_torchscript(TwoHeads(), (torch.zeros(2, 3), torch.ones(2, 3)), tmp_path / "model.pt")
    config = mc.ModelConfig(name="m", max_batch_size=8)
    config.input.add(name="INPUT__1", data_type=mc.TYPE_FP32, dims=[3])  # listed first, used second
    config.input.add(name="INPUT__0", data_type=mc.TYPE_FP32, dims=[3])
    backend = _loaded(tmp_path, config)
    x = np.ones((1, 3), dtype=np.float32)
    out = backend.infer({"INPUT__0": x * 5, "INPUT__1": x})
    np.testing.assert_array_equal(out["OUTPUT__1"], [[5, 5, 5]])


def test_bf16_round_trips_without_loss(tmp_path: Path) -> None:
    class Echo(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 1

    export_torchscript(Echo(), torch.zeros(2, 4, dtype=torch.bfloat16), tmp_path / "model.pt")
    config = mc.ModelConfig(name="m", max_batch_size=4)
    config.input.add(name="INPUT__0", data_type=mc.TYPE_BF16, dims=[4])
    backend = _loaded(tmp_path, config)
    assert config.output[0].data_type == mc.TYPE_BF16
    x = np.array([[1.5, -2.25, 3e8, 0.0078125]], dtype=ml_dtypes.bfloat16)
    x.setflags(write=False)  # as a binary wire buffer would be
    y = backend.infer({"INPUT__0": x})["OUTPUT__0"]
    assert y.dtype == ml_dtypes.bfloat16 and y.tobytes() == x.tobytes()


def test_bytes_inputs_are_refused(script_dir: Path) -> None:
    config = mc.ModelConfig(name="m", max_batch_size=4)
    config.input.add(name="INPUT__0", data_type=mc.TYPE_STRING, dims=[1])
    config.output.add(name="OUTPUT__0", data_type=mc.TYPE_FP32, dims=[8])
    with pytest.raises(Unsupported, match="BYTES"):
        TorchBackend(context(config, script_dir)).load()


def test_execute_three_requests(script_dir: Path) -> None:
    backend = _loaded(script_dir, _mlp_config())
    reqs = [{"INPUT__0": mlp_rows(n, seed=n)} for n in (2, 1, 4)]
    for req, res in zip(reqs, backend.execute(reqs), strict=True):
        assert isinstance(res, dict)
        assert_like_eager(res["OUTPUT__0"], req["INPUT__0"])
