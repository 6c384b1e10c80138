"""Model folders (config.pbtxt beside the version folders) and the one test repository.

:func:`build_test_repository` writes every model the integration tests serve, all with the tensor
names of :data:`harness.models.IO` where a model has one input and one output:

- ``simple``, ``mlp_onnx``, ``mlp_torchscript``, ``mlp_openvino``: from examples/build_repository.py
  (``simple``: INT32 [16] INPUT0 + INPUT1 -> OUTPUT0 sum, OUTPUT1 difference)
- ``echo_<dtype>`` for every numeric OIP datatype (FP16, BF16 included): ONNX Identity, dims [-1],
  max_batch_size 8; ``echo_bytes``: the same for BYTES on the Python backend (any bytes survive)
- ``classify``: FP32 [4] Identity with labels.txt (:data:`CLASS_LABELS`), for the classification extension
- ``counted``: INT32 [-1] Identity that only the statistics tests send to

A model that holds requests in flight is added per test with :func:`add_gated_model` (it needs the
test's gate port).
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from types import ModuleType

import numpy as np

from harness.models import (
    IO,
    NUMERIC_DTYPES,
    XY,
    dense_onnx,
    densenet_like_onnx,
    echo_py,
    gated_py,
    linear_torchscript,
    scale_onnx,
    unary_onnx,
)
from harness.models import write_python_model as _write_python_model

__all__ = [
    "CLASS_LABELS", "DENSENET_CONFIG", "TINY_WEIGHTS", "add_gated_model", "build_echo_models", "build_test_repository",
    "dense_model", "densenet_model", "echo_name", "io_config", "model_config", "onnx_echo", "pid_model", "python_model",
    "scale_model", "sequence_models", "tiny_repository", "write_config",
]  # fmt: skip

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "build_repository.py"
SEQUENCE_EXAMPLES = EXAMPLES.parent / "sequence_models" / "build_sequence_models.py"
#: Triton's docs/examples/model_repository/densenet_onnx/config.pbtxt (reshape on both sides, labels)
DENSENET_CONFIG = """\
name: "densenet_onnx"
platform: "onnxruntime_onnx"
max_batch_size : 0
input [ { name: "data_0" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 224, 224 ]
          reshape { shape: [ 1, 3, 224, 224 ] } } ]
output [ { name: "fc6_1" data_type: TYPE_FP32 dims: [ 1000 ] reshape { shape: [ 1, 1000, 1, 1 ] }
           label_filename: "densenet_labels.txt" } ]
"""
CLASS_LABELS = ["cat", "dog", "bird", "fish"]
#: ``tiny_*`` models: OUTPUT = INPUT @ TINY_WEIGHTS, FP32 [4] -> [3]
TINY_WEIGHTS = np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0
ONNX = 'platform: "onnxruntime_onnx"'
PYTHON = 'backend: "python"'


def echo_name(datatype: str) -> str:
    """The test repository's echo model for an OIP datatype: ``echo_fp32``, ``echo_bytes`` ..."""
    return f"echo_{datatype.lower()}"


def write_config(model_dir: Path, text: str) -> Path:
    """``<model_dir>/config.pbtxt`` from (dedented) text; the folder is created."""
    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / "config.pbtxt"
    path.write_text(textwrap.dedent(text))
    return path


Tensor = tuple[str, str, list[int]]  # (name, OIP datatype, dims)


def _tensors(specs: list[Tensor], extra: str = "") -> str:
    rows = []
    for name, datatype, dims in specs:
        triton = "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"
        rows.append(f'{{ name: "{name}", data_type: {triton}, dims: {dims}{extra} }}')
    return ", ".join(rows)


def model_config(name: str, runtime: str, inputs: list[Tensor], outputs: list[Tensor], *,
                 max_batch_size: int = 8, output_extra: str = "", extra: str = "") -> str:
    """config.pbtxt text: ``runtime`` is its platform/backend line, ``output_extra`` goes into every
    output (e.g. a label_filename), ``extra`` after the tensors (dynamic_batching, instance_group ...)."""
    return (
        f'name: "{name}"\n{runtime}\nmax_batch_size: {max_batch_size}\n'
        f"input [ {_tensors(inputs)} ]\noutput [ {_tensors(outputs, output_extra)} ]\n{textwrap.dedent(extra)}"
    )


def io_config(name: str, runtime: str, datatype: str, dims: list[int], *, io: tuple[str, str] = IO,
              max_batch_size: int = 8, output_extra: str = "", extra: str = "") -> str:
    """config.pbtxt of a one-input one-output model whose output has the input's type and dims."""
    return model_config(name, runtime, [(io[0], datatype, dims)], [(io[1], datatype, dims)],
                        max_batch_size=max_batch_size, output_extra=output_extra, extra=extra)


def onnx_echo(repo: Path, name: str, datatype: str, dims: list[int], *, labels: list[str] | None = None,
              io: tuple[str, str] = IO, max_batch_size: int = 8) -> Path:
    """An ONNX Identity model folder (with labels.txt when ``labels`` are given); returns the folder."""
    d = repo / name
    symbolic = [dim if dim >= 0 else f"d{k}" for k, dim in enumerate(dims)]
    batch = ["batch"] if max_batch_size else []
    unary_onnx(d / "1" / "model.onnx", "Identity", NUMERIC_DTYPES[datatype], [*batch, *symbolic], io)
    output_extra = ""
    if labels is not None:
        (d / "labels.txt").write_text("\n".join(labels) + "\n")
        output_extra = ', label_filename: "labels.txt"'
    write_config(d, io_config(name, ONNX, datatype, dims, io=io, max_batch_size=max_batch_size,
                              output_extra=output_extra))
    return d


def python_model(repo: Path, name: str, source: str, datatype: str, dims: list[int], *,
                 io: tuple[str, str] = IO, max_batch_size: int = 8, extra: str = "") -> Path:
    """A Python-backend model folder running ``source``; returns the folder."""
    d = repo / name
    _write_python_model(d, source)
    write_config(d, io_config(name, PYTHON, datatype, dims, io=io, max_batch_size=max_batch_size, extra=extra))
    return d


def pid_model(repo: Path, name: str, source: str, dims: list[int], *, max_batch_size: int = 8,
              extra: str = "") -> Path:
    """A Python-backend model folder running ``source`` (a :func:`harness.models.pid_py`): x FP32 ``dims``
    -> y (the same) and pid INT64 [1]; ``extra`` goes into config.pbtxt (instance_group ...)."""
    d = repo / name
    _write_python_model(d, source)
    inputs, outputs = [("x", "FP32", dims)], [("y", "FP32", dims), ("pid", "INT64", [1])]
    write_config(d, model_config(name, PYTHON, inputs, outputs, max_batch_size=max_batch_size, extra=extra))
    return d


def build_echo_models(repo: Path, io: tuple[str, str] = IO) -> Path:
    """``echo_<dtype>`` for every OIP datatype: ONNX Identity for the numeric ones, Python for BYTES."""
    for datatype in NUMERIC_DTYPES:
        onnx_echo(repo, echo_name(datatype), datatype, [-1], io=io)
    python_model(repo, echo_name("BYTES"), echo_py(io), "BYTES", [-1], io=io)
    return repo


def add_gated_model(repo: Path, gate_port: int) -> Path:
    """``gated``: FP32 [-1] echo on the Python backend that waits at the gate on 127.0.0.1:``gate_port``
    (a :class:`harness.gates.SocketGate`) before it answers; returns the folder."""
    return python_model(repo, "gated", gated_py(gate_port), "FP32", [-1])


def _examples(path: Path = EXAMPLES) -> ModuleType:
    """An examples/ builder script as a module (it is a script, not on sys.path)."""
    spec = importlib.util.spec_from_file_location(f"servelab_examples_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_test_repository(repo: Path) -> Path:
    """Write every test model (see the module docstring) under ``repo``, which must not hold them yet."""
    repo.mkdir(parents=True, exist_ok=True)
    examples = _examples()
    examples.build_simple(repo)
    examples.build_mlps(repo)
    build_echo_models(repo)
    onnx_echo(repo, "classify", "FP32", [4], labels=CLASS_LABELS)
    onnx_echo(repo, "counted", "INT32", [-1])
    return repo


def densenet_model(repo: Path) -> Path:
    """``densenet_onnx``: Triton's config over :func:`harness.models.densenet_like_onnx`, labels CLASS_<i>."""
    d = repo / "densenet_onnx"
    densenet_like_onnx(d / "1" / "model.onnx")
    write_config(d, DENSENET_CONFIG)
    (d / "densenet_labels.txt").write_text("\n".join(f"CLASS_{i}" for i in range(1000)) + "\n")
    return d


def sequence_models(repo: Path, *names: str) -> Path:
    """examples/sequence_models (all, or the named ones) under ``repo``: Triton's simple_sequence configs."""
    builder = _examples(SEQUENCE_EXAMPLES)
    return builder.build(repo, names or builder.MODELS)  # type: ignore[no-any-return]


def scale_model(repo: Path, name: str, versions: dict[int, float], config: str = "") -> Path:
    """``name`` with one version folder per entry, each ``y = x * factor`` (FP32 [4], onnxruntime; the
    unit tests' x/y names); ``config`` is appended to config.pbtxt (a version_policy ...)."""
    d = repo / name
    for version, factor in versions.items():
        scale_onnx(d / str(version) / "model.onnx", factor, io=XY)
    write_config(d, f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n' + textwrap.dedent(config))
    return d


def dense_model(repo: Path, name: str, *weights: np.ndarray, runtime: str = ONNX, io: tuple[str, str] = IO,
                max_batch_size: int = 16, extra: str = "") -> Path:
    """``name``: :func:`harness.models.dense_onnx` of ``weights`` (``y = x @ W`` for one), FP32 and
    batched, on onnxruntime; ``extra`` goes into config.pbtxt (dynamic_batching, instance_group ...)."""
    d = repo / name
    dense_onnx(d / "1" / "model.onnx", *weights, io=io)
    features_in, features_out = weights[0].shape[0], weights[-1].shape[1]
    inputs, outputs = [(io[0], "FP32", [features_in])], [(io[1], "FP32", [features_out])]
    write_config(d, model_config(name, runtime, inputs, outputs, max_batch_size=max_batch_size, extra=extra))
    return d


def tiny_repository(root: Path, with_torchscript: bool = False) -> Path:
    """``tiny_onnx`` (and ``tiny_torchscript``): one 4 -> 3 linear model on two runtimes, as the
    compare tools find model families (``<base>_<runtime>``)."""
    dense_model(root, "tiny_onnx", TINY_WEIGHTS, max_batch_size=32)
    if with_torchscript:
        d = root / "tiny_torchscript"
        linear_torchscript(d / "1" / "model.pt", TINY_WEIGHTS)
        inputs, outputs = [("INPUT__0", "FP32", [4])], [("OUTPUT__0", "FP32", [3])]
        write_config(d, model_config(d.name, 'platform: "pytorch_libtorch"', inputs, outputs, max_batch_size=32))
    return root
