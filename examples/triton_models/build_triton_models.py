"""Write a model repository of python-backend models that load on both servelab and Triton.

    python examples/triton_models/build_triton_models.py [--out examples/triton_models/repository]

Models (each a ``config.pbtxt`` and ``1/model.py``; the same files serve on both servers):
- ``add_sub``            Triton's add_sub example re-implemented: FP32 [4] INPUT0, INPUT1 -> OUTPUT0 (sum),
                         OUTPUT1 (difference); no batching (max_batch_size 0), as in Triton's example
- ``image_preprocess``   numpy pre-processing: UINT8 [64, 64, 3] IMAGE -> FP32 [3, 64, 64] PIXELS
                         (scaled, normalised per channel, HWC -> CHW)
- ``ort_inside``         onnxruntime inside a python model: a 64 -> 128 -> 16 MLP in ``model.onnx`` run by
                         ``servelab/bench/peers/_triton_onnx_model.py`` (the model.py ``servelab compare``
                         generates for Triton from an ONNX model), max_batch_size 8, one ORT thread
- ``sequence_accumulator`` a stateful model on the sequence batcher (direct, START/END/READY/CORRID):
                         INT32 [1] INPUT -> OUTPUT, the running sum per sequence, and CONTROLS (the
                         control values it was given), max_batch_size 4

All but ``ort_inside`` are kept here as files; its model.py is copied from the package, so the model
``compare`` generates and the one ``benchmarks/vs_triton.py`` measures are the same file.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from servelab.bench.peers.base import ModelArtefacts, TensorInfo
from servelab.bench.peers.triton import write_onnx_runner

HERE = Path(__file__).resolve().parent
MODELS = ("add_sub", "image_preprocess", "ort_inside", "sequence_accumulator")
_KEPT = ("add_sub", "image_preprocess", "sequence_accumulator")
SEED = 0


def write_mlp_onnx(path: Path, features: int = 64, hidden: int = 128, classes: int = 16) -> Path:
    """A seeded two-layer MLP (Gemm, Relu, Gemm) with a dynamic batch dimension."""
    rng = np.random.default_rng(SEED)
    w1 = (rng.standard_normal((features, hidden)) / np.sqrt(features)).astype(np.float32)
    w2 = (rng.standard_normal((hidden, classes)) / np.sqrt(hidden)).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(np.zeros(hidden, np.float32), "B1"),
             numpy_helper.from_array(w2, "W2"), numpy_helper.from_array(np.zeros(classes, np.float32), "B2")]  # fmt: skip
    nodes = [helper.make_node("Gemm", ["INPUT", "W1", "B1"], ["H"]), helper.make_node("Relu", ["H"], ["HR"]),
             helper.make_node("Gemm", ["HR", "W2", "B2"], ["OUTPUT"])]  # fmt: skip
    graph = helper.make_graph(
        nodes, "ort_inside",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", features])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["batch", classes])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path


def build(out: Path) -> Path:
    """(Re)write the models under ``out``; return it."""
    for name in MODELS:
        shutil.rmtree(out / name, ignore_errors=True)
    for name in _KEPT:
        shutil.copytree(HERE / name, out / name, ignore=shutil.ignore_patterns("__pycache__"))
    scratch = out / "_build"
    onnx_path = write_mlp_onnx(scratch / "model.onnx")
    arts = ModelArtefacts(
        "ort_inside", (TensorInfo("INPUT", "FP32", (64,)),), (TensorInfo("OUTPUT", "FP32", (16,)),),
        max_batch_size=8, onnx=onnx_path,
    )  # fmt: skip
    write_onnx_runner(out / "ort_inside", arts)
    shutil.rmtree(scratch)
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))  # examples/, for the builders' shared command line
    from _build_cli import build_main

    build_main(__doc__, build, HERE, "python-backend models", MODELS)
