"""Artefacts as models of a Triton-layout repository: ``<repo>/<name>/config.pbtxt`` + ``1/model.<ext>``.

One config per artefact, written through the typed parameter schema (backends/parameters.py), so the
values ``convert`` and ``select`` write are the ones the backends read back.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from servelab.backends.parameters import ModelParameters
from servelab.convert.source_types import TensorInfo
from servelab.protocol import model_config_pb2 as mc
from servelab.repository import config_to_text

__all__ = ["BACKEND_OF", "FILE_OF", "PLATFORM_OF", "model_config", "write_model"]

#: convert target -> config.pbtxt ``backend``
BACKEND_OF = {
    "onnx": "onnxruntime", "openvino": "openvino", "torchscript": "pytorch", "torch_export": "pytorch",
    "tensorrt": "tensorrt",
}  # fmt: skip
#: convert target -> Triton ``platform`` where one names the file format
PLATFORM_OF = {"torchscript": "pytorch_libtorch", "torch_export": "torch_export"}
#: convert target -> the model file name in the version folder
FILE_OF = {
    "onnx": "model.onnx", "openvino": "model.xml", "torchscript": "model.pt", "torch_export": "model.pt2",
    "tensorrt": "model.plan",
}  # fmt: skip


def _tensors(field: object, infos: Sequence[TensorInfo], batched: bool) -> None:
    for t in infos:
        dims = list(t.dims if batched else t.shape)
        field.add(name=t.name, data_type=mc.DataType.Value(t.dtype.triton_name), dims=dims)  # type: ignore[attr-defined]


def model_config(
    name: str,
    target: str,
    inputs: Sequence[TensorInfo],
    outputs: Sequence[TensorInfo],
    max_batch_size: int,
    parameters: Sequence[ModelParameters] = (),
) -> mc.ModelConfig:
    """A complete config for one artefact (backend, tensors, batch size, typed parameters)."""
    config = mc.ModelConfig(name=name, backend=BACKEND_OF[target], max_batch_size=max_batch_size)
    if target in PLATFORM_OF:
        config.platform = PLATFORM_OF[target]
    _tensors(config.input, inputs, max_batch_size > 0)
    _tensors(config.output, outputs, max_batch_size > 0)
    for params in parameters:
        params.write(config)
    return config


def write_model(repository: Path, config: mc.ModelConfig, files: Sequence[Path], version: int = 1) -> Path:
    """Write ``config.pbtxt`` and move ``files`` into the version folder; returns the model folder."""
    folder = repository / config.name
    version_dir = folder / str(version)
    version_dir.mkdir(parents=True, exist_ok=True)
    for f in files:
        target = version_dir / f.name
        if f.resolve() != target.resolve():
            if target.is_dir():
                shutil.rmtree(target)
            shutil.move(str(f), str(target))
    (folder / "config.pbtxt").write_text(config_to_text(config))
    return folder
