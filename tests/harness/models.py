"""Every tiny model the tests build (nothing is downloaded): ONNX graphs, the torch MLP, Python models.

One writer, :func:`save_onnx`, holds the opset and IR version and checks the graph, so every ONNX file
of the suite is made the same way; the builders below only say which nodes and tensors. Tensor names
default to :data:`IO` (``INPUT``/``OUTPUT``, the test repository's); unit tests that drive a backend
directly pass :data:`XY`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

if TYPE_CHECKING:
    import torch

__all__ = [
    "DTYPES", "ECHO_PY", "GATED_PY", "IO", "NUMERIC_DTYPES", "PID_PY", "SAGE_LAYERS_SOURCE", "XY",
    "auto_complete_py", "dense_onnx", "densenet_like_onnx", "eager", "echo_py", "gated_py",
    "linear_torchscript", "onnx_model", "pid_py", "sage_layers_source", "save_onnx", "scale_onnx", "tensor", "torch_mlp",
    "unary_onnx", "unary_onnx_bytes", "write_python_model",
]  # fmt: skip

OPSET = 17
IR_VERSION = 9
#: the test repository's tensor names (single-input models)
IO = ("INPUT", "OUTPUT")
#: the unit tests' tensor names (backends, schedulers and the Engine's small repositories)
XY = ("x", "y")

#: OIP datatype -> ONNX element type, every numeric type
NUMERIC_DTYPES: dict[str, int] = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BF16": TensorProto.BFLOAT16,
}
#: every OIP datatype (BYTES is an ONNX string tensor)
DTYPES: dict[str, int] = {**NUMERIC_DTYPES, "BYTES": TensorProto.STRING}

Dims = Sequence[int | str]


def tensor(name: str, elem_type: int, dims: Dims) -> onnx.ValueInfoProto:
    """A graph input or output; a str dim is symbolic (e.g. the batch)."""
    return helper.make_tensor_value_info(name, elem_type, list(dims))


def onnx_model(
    nodes: Iterable[onnx.NodeProto],
    inputs: Iterable[onnx.ValueInfoProto],
    outputs: Iterable[onnx.ValueInfoProto],
    initializers: Iterable[onnx.TensorProto] = (),
    name: str = "model",
) -> onnx.ModelProto:
    """One checked ONNX model of this suite's opset and IR version."""
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model


def save_onnx(
    path: Path,
    nodes: Iterable[onnx.NodeProto],
    inputs: Iterable[onnx.ValueInfoProto],
    outputs: Iterable[onnx.ValueInfoProto],
    initializers: Iterable[onnx.TensorProto] = (),
    name: str = "model",
) -> Path:
    """Check and write one ONNX model (parent folders created); returns ``path``."""
    return _write(path, onnx_model(nodes, inputs, outputs, initializers, name))


def _write(path: Path, model: onnx.ModelProto) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path


def _unary(op: str, elem_type: int, dims: Dims, io: tuple[str, str]) -> onnx.ModelProto:
    i, o = io
    node = helper.make_node(op, [i], [o])
    return onnx_model([node], [tensor(i, elem_type, dims)], [tensor(o, elem_type, dims)], name=op.lower())


def unary_onnx(
    path: Path,
    op: str = "Identity",
    elem_type: int = TensorProto.FLOAT,
    dims: Dims = ("batch", 4),
    io: tuple[str, str] = IO,
) -> Path:
    """``OUTPUT = op(INPUT)`` of one element type and shape: Identity (an echo), Relu, Neg ..."""
    return _write(path, _unary(op, elem_type, dims, io))


def unary_onnx_bytes(
    op: str = "Identity", elem_type: int = TensorProto.FLOAT, dims: Dims = ("batch", 4), io: tuple[str, str] = IO
) -> bytes:
    """:func:`unary_onnx`'s model as bytes (an upload's ``file:1/model.onnx``, no file written)."""
    return _unary(op, elem_type, dims, io).SerializeToString()


def scale_onnx(path: Path, factor: float, io: tuple[str, str] = IO, features: int = 4) -> Path:
    """``OUTPUT = INPUT * factor``, FP32 [batch, features]: versions of one model that answer differently."""
    i, o = io
    k = helper.make_tensor("k", TensorProto.FLOAT, [1], [factor])
    dims = ("batch", features)
    node = helper.make_node("Mul", [i, "k"], [o])
    return save_onnx(path, [node], [tensor(i, TensorProto.FLOAT, dims)], [tensor(o, TensorProto.FLOAT, dims)], [k])


def dense_onnx(path: Path, *weights: np.ndarray, io: tuple[str, str] = IO) -> Path:
    """``x @ W0``, then ReLU and ``@ W1`` for each further weight: a linear layer or a small MLP, FP32
    with a symbolic batch dim (the answer for reference is the same chain in numpy)."""
    i, o = io
    nodes, inits, current = [], [], i
    for k, w in enumerate(weights):
        inits.append(numpy_helper.from_array(np.asarray(w, np.float32), f"W{k}"))
        if k:
            nodes.append(helper.make_node("Relu", [current], [f"r{k}"]))
            current = f"r{k}"
        out = o if k == len(weights) - 1 else f"h{k}"
        nodes.append(helper.make_node("MatMul", [current, f"W{k}"], [out]))
        current = out
    x = tensor(i, TensorProto.FLOAT, ["batch", weights[0].shape[0]])
    y = tensor(o, TensorProto.FLOAT, ["batch", weights[-1].shape[1]])
    return save_onnx(path, nodes, [x], [y], inits, name="dense")


def densenet_like_onnx(path: Path) -> Path:
    """The tensors of Triton's densenet_onnx example (data_0 FP32 [1, 3, 224, 224] -> fc6_1 [1, 1000, 1, 1])
    around a tiny graph: score of class i = 3 i mean(data_0)."""
    weights = numpy_helper.from_array(np.tile(np.arange(1000, dtype=np.float32), (3, 1)), "w")
    flat = numpy_helper.from_array(np.array([1, 3], np.int64), "flat")
    shape = numpy_helper.from_array(np.array([1, 1000, 1, 1], np.int64), "shape")
    nodes = [helper.make_node("GlobalAveragePool", ["data_0"], ["pooled"]),
             helper.make_node("Reshape", ["pooled", "flat"], ["rows"]), helper.make_node("MatMul", ["rows", "w"], ["m"]),
             helper.make_node("Reshape", ["m", "shape"], ["fc6_1"])]  # fmt: skip
    x, y = tensor("data_0", TensorProto.FLOAT, [1, 3, 224, 224]), tensor("fc6_1", TensorProto.FLOAT, [1, 1000, 1, 1])
    return save_onnx(path, nodes, [x], [y], [weights, flat, shape], name="densenet_like")


def torch_mlp(features_in: int = 16, hidden: int = 64, features_out: int = 8, seed: int = 0) -> torch.nn.Module:
    """Linear-ReLU-Linear with fixed weights (the example repository's ``mlp_*`` models are this one)."""
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(features_in, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, features_out)
    ).eval()


def eager(module: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    """The reference answer: ``module`` run by torch itself."""
    import torch

    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


def linear_torchscript(path: Path, weights: np.ndarray) -> Path:
    """``x @ weights`` traced to TorchScript (what TorchServe and pytorch_libtorch load)."""
    import warnings

    import torch

    class Linear(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.from_numpy(np.array(weights, np.float32)), requires_grad=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.w

    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit is deprecated, TorchServe still needs it
        torch.jit.trace(Linear().eval(), torch.zeros(1, weights.shape[0])).save(str(path))
    return path


# ----- Python-backend models -----
ECHO_PY = """\
class TritonPythonModel:
    def execute(self, requests):
        return [{{"{o}": r.inputs["{i}"]}} for r in requests]
"""

#: Connects to 127.0.0.1:<port> when it starts executing and answers only after the test sends a byte
#: back (see harness.gates.SocketGate): a request is held in flight without guessing at timings, in
#: this process, a worker process or a server subprocess alike.
GATED_PY = """\
import socket


class TritonPythonModel:
    def execute(self, requests):
        with socket.create_connection(("127.0.0.1", {port}), timeout=60) as gate:
            gate.sendall(b"entered")
            if not gate.recv(1):
                raise RuntimeError("the gate closed without releasing the request")
        return [{{"OUTPUT": r.inputs["INPUT"]}} for r in requests]
"""


#: x FP32 -> y = x * {factor} and pid INT64 [1] (per row when batched): the process that ran the call, so a
#: test sees which worker served it; optionally hangs forever on a first value > 0, or logs each load
PID_PY = """\
import os
import threading

import numpy as np


class TritonPythonModel:
    def initialize(self, args):
        if {log_loads}:  # one line per load (its pid) in <model folder>/loads.txt
            with open(os.path.join(args["model_repository"], "loads.txt"), "a") as f:
                f.write(f"{{os.getpid()}}\\n")

    def execute(self, requests):
        out = []
        for r in requests:
            x = r.get("x")
            if {hang_on_positive} and float(x.reshape(-1)[0]) > 0:
                threading.Event().wait()  # a call that never returns
            out.append({{"y": x * {factor}, "pid": np.full(x.shape[:-1] + (1,), os.getpid(), np.int64)}})
        return out
"""


def pid_py(factor: float = 1.0, *, hang_on_positive: bool = False, log_loads: bool = False) -> str:
    """model.py source of :data:`PID_PY` (see :func:`harness.repository.pid_model` for its config)."""
    return PID_PY.format(factor=float(factor), hang_on_positive=hang_on_positive, log_loads=log_loads)


def echo_py(io: tuple[str, str] = IO) -> str:
    """model.py source that answers each request with its input (any bytes survive)."""
    return ECHO_PY.format(i=io[0], o=io[1])


def gated_py(port: int) -> str:
    """model.py source of the gated INPUT -> OUTPUT echo: waits at the gate on 127.0.0.1:``port``."""
    return GATED_PY.format(port=port)


#: Triton's API, no config.pbtxt needed: auto_complete_config declares FP32 [4] {i} -> {o} (= 2 x {i}),
#: max_batch_size {mbs} with dynamic batching; what the file prints while imported goes to the log
AUTO_COMPLETE_PY = """\
import triton_python_backend_utils as pb_utils

print("auto-complete model imported")


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({{"name": "{i}", "data_type": "TYPE_FP32", "dims": [4]}})
        auto_complete_model_config.add_output({{"name": "{o}", "data_type": "TYPE_FP32", "dims": [4]}})
        auto_complete_model_config.set_max_batch_size({mbs})
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("{o}", r.get("{i}") * 2)]) for r in requests]
"""


def auto_complete_py(io: tuple[str, str] = IO, max_batch_size: int = 4) -> str:
    """model.py source of a python model whose ``auto_complete_config`` writes its whole config."""
    return AUTO_COMPLETE_PY.format(i=io[0], o=io[1], mbs=max_batch_size)


def write_python_model(model_dir: Path, source: str, version: int = 1) -> Path:
    """``<model_dir>/<version>/model.py``; returns its path."""
    path = model_dir / str(version) / "model.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return path


#: a module-factory source (``servelab convert`` / ``select``) of GraphSAGE layers, a model that does not batch
SAGE_LAYERS_SOURCE = """\
import torch
from servelab.graph.model import SageConfig, SageLayers
from servelab.graph.parity import example_block

input_names = ["x", "nbr1", "nbr2"]
output_names = ["logits", "embeddings"]
max_batch_size = 0
dynamic_axes = {{"x": {{0: "n_all"}}, "nbr1": {{0: "n1"}}, "nbr2": {{0: "batch"}},
                 "logits": {{0: "batch"}}, "embeddings": {{0: "batch"}}}}


def make_model():
    torch.manual_seed(0)
    return SageLayers(SageConfig({features}, {classes}, hidden={hidden}, fanouts={fanouts})).eval()


def example_inputs():
    return tuple(torch.from_numpy(a) for a in example_block({features}, {fanouts}, batch=2, hop1=3, hop2=4, seed=1))
"""


def sage_layers_source(features: int, classes: int, hidden: int, fanouts: tuple[int, int]) -> str:
    """Python source of small GraphSAGE layers with random weights: x [n_all, F], nbr1, nbr2 -> logits, embeddings."""
    return SAGE_LAYERS_SOURCE.format(features=features, classes=classes, hidden=hidden, fanouts=fanouts)
