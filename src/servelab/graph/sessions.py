"""Run exported GraphSAGE artefacts: ONNX Runtime and OpenVINO sessions, numpy in and numpy out.

This is the part of the graph package a server needs at serve time (the fused ``graphsage`` backend
and the layers benchmarks load through it); it imports no torch. Only the TorchScript runner and the
eager runner, which run torch models by definition, import torch, when they are called.

Every layers artefact takes (x float32 [n_all, F], nbr1 int64 [n1, f1], nbr2 int64 [B, f2]) and
returns (logits [B, C], embeddings [B, hidden]) with n_all, n1 and B dynamic.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "INPUT_NAMES",
    "OUTPUT_NAMES",
    "RUNTIMES",
    "LayersFn",
    "eager_runner",
    "load_runner",
    "openvino_model",
    "ort_session",
]

INPUT_NAMES = ("x", "nbr1", "nbr2")
OUTPUT_NAMES = ("logits", "embeddings")
#: runtime -> file name in the version directory
RUNTIMES = {"onnxruntime": "model.onnx", "openvino": "model.xml", "torch": "model.pt"}
#: (x, nbr1, nbr2) -> (logits, embeddings), all numpy
LayersFn = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def ort_session(path: Path, threads: int) -> object:
    """An ONNX Runtime CPU session with ``threads`` intra-op threads that do not spin."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    # Spinning threads fight a numba sampler in the same process for the same cores.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def openvino_model(path: Path, threads: int) -> object:
    """An OpenVINO CPU compiled model: ``threads`` threads, float32, latency hint."""
    import openvino as ov

    config = {
        "INFERENCE_NUM_THREADS": threads,
        "INFERENCE_PRECISION_HINT": "f32",
        "PERFORMANCE_HINT": "LATENCY",
    }
    return ov.Core().compile_model(str(path), "CPU", config)


def eager_runner(model: Any) -> LayersFn:
    """Eager torch over an in-memory (or TorchScript-loaded) SageLayers, numpy in and out."""
    import torch

    module = model.eval()

    def run(x: np.ndarray, nbr1: np.ndarray, nbr2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with torch.inference_mode():
            logits, emb = module(torch.from_numpy(x), torch.from_numpy(nbr1), torch.from_numpy(nbr2))
        return logits.numpy(), emb.numpy()

    return run


def _onnx_runner(path: Path, threads: int) -> LayersFn:
    session = ort_session(path, threads)

    def run(x: np.ndarray, nbr1: np.ndarray, nbr2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits, emb = session.run(list(OUTPUT_NAMES), {"x": x, "nbr1": nbr1, "nbr2": nbr2})  # type: ignore[attr-defined]
        return logits, emb

    return run


def _openvino_runner(path: Path, threads: int) -> LayersFn:
    compiled = openvino_model(path, threads)
    request = compiled.create_infer_request()  # type: ignore[attr-defined]
    out_logits, out_emb = compiled.output("logits"), compiled.output("embeddings")  # type: ignore[attr-defined]

    def run(x: np.ndarray, nbr1: np.ndarray, nbr2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        result = request.infer({"x": x, "nbr1": nbr1, "nbr2": nbr2})
        return np.array(result[out_logits]), np.array(result[out_emb])

    return run


def _torchscript_runner(path: Path, threads: int) -> LayersFn:
    import torch

    torch.set_num_threads(threads)  # process-wide: torch has no per-module thread pool
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # jit.load is deprecated, still the format
        scripted = torch.jit.load(str(path))
    return eager_runner(scripted)


def load_runner(runtime: str, path: Path, threads: int = 1) -> LayersFn:
    """A numpy-in, numpy-out callable over an exported artefact of ``runtime`` (a key of RUNTIMES)."""
    loaders = {"onnxruntime": _onnx_runner, "openvino": _openvino_runner, "torch": _torchscript_runner}
    if runtime not in loaders:
        raise ValueError(f"runtime must be one of {sorted(loaders)}, got {runtime!r}")
    return loaders[runtime](Path(path), threads)
