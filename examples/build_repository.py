"""Write the bundled example repository from tiny models built here (nothing is downloaded).

    python examples/build_repository.py [--out examples/repository]

Models:
- ``simple``            ONNX, Triton's classic: INT32 [16] INPUT0 + INPUT1 -> OUTPUT0 (sum), OUTPUT1 (difference)
- ``mlp_onnx``          a 16 -> 64 -> 8 MLP on ONNX Runtime
- ``mlp_torchscript``   the same MLP as TorchScript on torch
- ``mlp_openvino``      the same MLP as OpenVINO IR
- ``preprocess``        Python backend: UINT8 [16] pixels -> normalised FP32 [16]
- ``pipeline``          ensemble: preprocess -> mlp_torchscript -> OUTPUT (classification-ready scores)
- ``sage``              GraphSAGE ensemble over ``graphsage_sampler`` and ``graphsage_layers`` (ONNX Runtime)
- ``sage_fused``        the same GraphSAGE in one model call (numba aggregation + a dense ONNX graph)
                        on a 100k-node graph stored in ``_graphs/demo`` (see examples/build_graph.py)
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = Path(__file__).parent
SEED = 0


def _model_folder(repo: Path, name: str, config: str) -> Path:
    """``<repo>/<name>`` with an empty version folder ``1`` and ``config`` (dedented) as config.pbtxt."""
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(textwrap.dedent(config))
    return d


SIMPLE_CONFIG = """\
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 32
input [
  { name: "INPUT0", data_type: TYPE_INT32, dims: [16] },
  { name: "INPUT1", data_type: TYPE_INT32, dims: [16] }
]
output [
  { name: "OUTPUT0", data_type: TYPE_INT32, dims: [16] },
  { name: "OUTPUT1", data_type: TYPE_INT32, dims: [16] }
]
"""


def build_simple(repo: Path) -> None:
    d = _model_folder(repo, "simple", SIMPLE_CONFIG)
    x0 = helper.make_tensor_value_info("INPUT0", TensorProto.INT32, ["batch", 16])
    x1 = helper.make_tensor_value_info("INPUT1", TensorProto.INT32, ["batch", 16])
    y0 = helper.make_tensor_value_info("OUTPUT0", TensorProto.INT32, ["batch", 16])
    y1 = helper.make_tensor_value_info("OUTPUT1", TensorProto.INT32, ["batch", 16])
    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]), helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])],
        "simple",
        [x0, x1],
        [y0, y1],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    onnx.save(model, d / "1" / "model.onnx")


def make_mlp() -> object:
    import torch

    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()


def build_mlps(repo: Path) -> None:
    import torch

    from servelab.convert.export import export_onnx, export_openvino, export_torchscript

    mlp = make_mlp()
    example = (torch.zeros(1, 16),)
    labels = "\n".join(f"class_{i}" for i in range(8)) + "\n"
    io = """\
        input [ {{ name: "{i}", data_type: TYPE_FP32, dims: [16] }} ]
        output [ {{ name: "{o}", data_type: TYPE_FP32, dims: [8], label_filename: "labels.txt" }} ]
        """
    specs = {
        "mlp_onnx": ("model.onnx", "onnxruntime_onnx", "INPUT", "OUTPUT"),
        "mlp_torchscript": ("model.pt", "pytorch_libtorch", "INPUT__0", "OUTPUT__0"),
        "mlp_openvino": ("model.xml", "openvino", "INPUT", "OUTPUT"),
    }
    for name, (_filename, platform, i, o) in specs.items():
        backend = 'backend: "openvino"' if platform == "openvino" else f'platform: "{platform}"'
        config = f'name: "{name}"\n{backend}\nmax_batch_size: 32\n' + textwrap.dedent(io.format(i=i, o=o))
        (_model_folder(repo, name, config) / "labels.txt").write_text(labels)
    export_onnx(mlp, example, repo / "mlp_onnx/1/model.onnx", ["INPUT"], ["OUTPUT"])
    export_torchscript(mlp, example, repo / "mlp_torchscript/1/model.pt")
    export_openvino(repo / "mlp_onnx/1/model.onnx", repo / "mlp_openvino/1/model.xml")


PREPROCESS = '''\
"""Python backend example: normalise UINT8 pixels to FP32, as a pre-processing step would.

Written against Triton's python backend API, so the same file loads on Triton too.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.mean, self.std = 127.5, 64.0

    def execute(self, requests):
        responses = []
        for request in requests:
            pixels = pb_utils.get_input_tensor_by_name(request, "PIXELS").as_numpy()
            normalised = (pixels.astype(np.float32) - self.mean) / self.std
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("PIXELS_NORM", normalised)]))
        return responses

    def finalize(self):
        pass
'''


PREPROCESS_CONFIG = """\
name: "preprocess"
backend: "python"
max_batch_size: 32
input [ { name: "PIXELS", data_type: TYPE_UINT8, dims: [16] } ]
output [ { name: "PIXELS_NORM", data_type: TYPE_FP32, dims: [16] } ]
"""


def build_preprocess(repo: Path) -> None:
    (_model_folder(repo, "preprocess", PREPROCESS_CONFIG) / "1" / "model.py").write_text(PREPROCESS)


PIPELINE_CONFIG = """\
name: "pipeline"
platform: "ensemble"
max_batch_size: 32
input [ { name: "PIXELS", data_type: TYPE_UINT8, dims: [16] } ]
output [ { name: "SCORES", data_type: TYPE_FP32, dims: [8] } ]
ensemble_scheduling {
  step [
    {
      model_name: "preprocess"
      model_version: -1
      input_map { key: "PIXELS" value: "PIXELS" }
      output_map { key: "PIXELS_NORM" value: "normalised" }
    },
    {
      model_name: "mlp_torchscript"
      model_version: -1
      input_map { key: "INPUT__0" value: "normalised" }
      output_map { key: "OUTPUT__0" value: "SCORES" }
    }
  ]
}
"""


def build_pipeline(repo: Path) -> None:
    _model_folder(repo, "pipeline", PIPELINE_CONFIG)


def build(out: Path, with_graph: bool = True, graph_nodes: int = 100_000) -> Path:
    """Write every example model into ``out`` (emptied first); ``graph_nodes`` sizes the GraphSAGE graph."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    np.random.seed(SEED)
    build_simple(out)
    build_mlps(out)
    build_preprocess(out)
    build_pipeline(out)
    if with_graph:  # graphsage_sampler, graphsage_layers, sage and their graph (examples/build_graph.py)
        _sibling("build_graph").build_graph_pipeline(out, graph_nodes)
    return out


def _sibling(name: str) -> ModuleType:
    """Another script of this folder as a module (this one is also loaded by path, off sys.path)."""
    spec = importlib.util.spec_from_file_location(f"servelab_examples_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    from _build_cli import build_main  # beside this file, on sys.path when it runs as a script

    build_main(__doc__, build, HERE, "example repository")
