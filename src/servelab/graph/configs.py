"""The config.pbtxt of each model that ``servelab graph export`` writes into a Triton-style repository.

``graphsage_sampler`` (node ids -> padded block), ``graphsage_layers`` (block -> logits, embeddings on
one runtime), the ``sage`` ensemble over both, and ``sage_fused`` (the same pipeline in one model
call, :mod:`servelab.graph.fused`). Plain protobuf: no torch, no runtime; parameters go through the
typed schemas the backends read (:mod:`servelab.graph.parameters`, backends/parameters.py).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from google.protobuf import text_format

from servelab.backends.parameters import OnnxRuntimeParameters
from servelab.graph.parameters import FusedSageParameters, GraphSamplerParameters
from servelab.graph.sessions import INPUT_NAMES, OUTPUT_NAMES, RUNTIMES
from servelab.protocol import model_config_pb2 as mc

__all__ = [
    "ENSEMBLE_MODEL",
    "FUSED_MODEL",
    "LAYERS_MODEL",
    "SAMPLER_MODEL",
    "ensemble_config",
    "fused_config",
    "graph_param",
    "layers_config",
    "sampler_config",
    "write_config",
]

SAMPLER_MODEL, LAYERS_MODEL, ENSEMBLE_MODEL = "graphsage_sampler", "graphsage_layers", "sage"
#: one-call variant of ``sage`` (servelab.graph.fused), written for mean-aggregator models
FUSED_MODEL = "sage_fused"
#: runtime -> config.pbtxt ``backend:`` of the layers model
_LAYER_BACKENDS = {"onnxruntime": "onnxruntime", "openvino": "openvino", "torch": "pytorch"}


def _graph_inputs(features: int) -> list[mc.ModelInput]:
    """node_ids, plus the optional inputs of inductive requests (new nodes' features, new edges)."""
    return [
        mc.ModelInput(name="node_ids", data_type=mc.TYPE_INT64, dims=[-1]),
        mc.ModelInput(name="new_features", data_type=mc.TYPE_FP32, dims=[-1, features], optional=True),
        mc.ModelInput(name="new_edges", data_type=mc.TYPE_INT64, dims=[-1, 2], optional=True),
    ]


def sampler_config(graph_dir: str, features: int, fanouts: tuple[int, int]) -> mc.ModelConfig:
    """``graphsage_sampler``: node ids (and inductive inputs) in, the padded block (x, nbr1, nbr2) out."""
    cfg = mc.ModelConfig(name=SAMPLER_MODEL, backend="graphsage_sampler", max_batch_size=0)
    cfg.input.extend(_graph_inputs(features))
    cfg.output.extend(
        [
            mc.ModelOutput(name="x", data_type=mc.TYPE_FP32, dims=[-1, features]),
            mc.ModelOutput(name="nbr1", data_type=mc.TYPE_INT64, dims=[-1, fanouts[1]]),
            mc.ModelOutput(name="nbr2", data_type=mc.TYPE_INT64, dims=[-1, fanouts[0]]),
        ]
    )
    GraphSamplerParameters(graph_dir=graph_dir, fanouts=fanouts).write(cfg)
    return cfg


def layers_config(
    runtime: str, features: int, hidden: int, classes: int, fanouts: tuple[int, int]
) -> mc.ModelConfig:
    """``graphsage_layers`` on ``runtime``: the block in, logits and embeddings out."""
    cfg = mc.ModelConfig(
        name=LAYERS_MODEL,
        backend=_LAYER_BACKENDS[runtime],
        max_batch_size=0,
        default_model_filename=RUNTIMES[runtime],
    )
    cfg.input.extend(
        [
            mc.ModelInput(name="x", data_type=mc.TYPE_FP32, dims=[-1, features]),
            mc.ModelInput(name="nbr1", data_type=mc.TYPE_INT64, dims=[-1, fanouts[1]]),
            mc.ModelInput(name="nbr2", data_type=mc.TYPE_INT64, dims=[-1, fanouts[0]]),
        ]
    )
    cfg.output.extend(
        [
            mc.ModelOutput(name="logits", data_type=mc.TYPE_FP32, dims=[-1, classes]),
            mc.ModelOutput(name="embeddings", data_type=mc.TYPE_FP32, dims=[-1, hidden]),
        ]
    )
    if runtime == "onnxruntime":
        # Spinning intra-op threads fight the sampler and the front-ends for 2 cores: served over gRPC
        # at batch 1 on the 1M-node graph, P99 fell from 4-6 ms to ~1.1 ms with spinning off.
        OnnxRuntimeParameters(allow_spinning=False).write(cfg)
    # Measured alternative (benchmarks/RESULTS.md): two single-thread instances cut in-process batch-1 P50
    # (114 -> 95 us) but served end to end gave lower nodes/s (22.7k vs 27.2k) and no better gRPC P50, so
    # one instance with every core stays the default; add `instance_group` to the config to switch.
    return cfg


def _sage_outputs(hidden: int, classes: int) -> list[mc.ModelOutput]:
    """logits and embeddings: the outputs of ``sage`` and ``sage_fused``."""
    return [
        mc.ModelOutput(name="logits", data_type=mc.TYPE_FP32, dims=[-1, classes]),
        mc.ModelOutput(name="embeddings", data_type=mc.TYPE_FP32, dims=[-1, hidden]),
    ]


def ensemble_config(features: int, hidden: int, classes: int) -> mc.ModelConfig:
    """``sage``: the sampler's block fed to the layers, as one Triton ensemble."""
    cfg = mc.ModelConfig(name=ENSEMBLE_MODEL, platform="ensemble", max_batch_size=0)
    inputs = _graph_inputs(features)
    cfg.input.extend(inputs)
    cfg.output.extend(_sage_outputs(hidden, classes))
    blocks = {name: name for name in INPUT_NAMES}
    cfg.ensemble_scheduling.step.extend(
        [
            mc.ModelEnsembling.Step(
                model_name=SAMPLER_MODEL,
                model_version=-1,
                input_map={i.name: i.name for i in inputs},
                output_map=blocks,
            ),
            mc.ModelEnsembling.Step(
                model_name=LAYERS_MODEL,
                model_version=-1,
                input_map=blocks,
                output_map={name: name for name in OUTPUT_NAMES},
            ),
        ]
    )
    return cfg


def fused_config(runtime: str, graph_dir: str, features: int, hidden: int, classes: int,
                  fanouts: tuple[int, int], instances: int | None = None) -> mc.ModelConfig:  # fmt: skip
    """``sage_fused``: the ``graphsage`` backend over the dense graph, same inputs and outputs as ``sage``;
    ``instances``: an ``instance_group`` of that many CPU instances (None: none written, the server's default)."""
    cfg = mc.ModelConfig(
        name=FUSED_MODEL, backend="graphsage", max_batch_size=0, default_model_filename="model.onnx"
    )
    cfg.input.extend(_graph_inputs(features))
    cfg.output.extend(_sage_outputs(hidden, classes))
    # the dense graph is ONNX: OpenVINO reads it directly; torch layers fall back to ONNX Runtime here
    dense_runtime = "openvino" if runtime == "openvino" else "onnxruntime"
    FusedSageParameters(graph_dir=graph_dir, fanouts=fanouts, runtime=dense_runtime).write(cfg)
    if instances is not None:
        if instances < 1:
            raise ValueError(f"instances must be at least 1, got {instances}")
        cfg.instance_group.add(count=instances, kind=mc.ModelInstanceGroup.KIND_CPU)
    return cfg


def write_config(repository: Path, cfg: mc.ModelConfig) -> Path:
    """Write ``cfg`` as ``repository/<name>/config.pbtxt`` (and create version folder 1)."""
    model_dir = repository / cfg.name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    path = model_dir / "config.pbtxt"
    path.write_text(text_format.MessageToString(cfg))
    return path


#: where a graph store from outside the repository is linked to (the scanner skips '_' folders)
GRAPHS_SUBDIR = "_graphs"


def graph_param(graph_dir: Path, repository: Path) -> str:
    """The ``graph_dir`` parameter, relative to the repository: the server opens graph stores only inside
    it (:mod:`servelab.trust`), so a store elsewhere is hard-linked (else copied) to ``_graphs/<name>``."""
    graph_dir, repository = graph_dir.resolve(), repository.resolve()
    if not graph_dir.is_relative_to(repository):
        target = repository / GRAPHS_SUBDIR / graph_dir.name

        def link(src: str, dst: str) -> None:
            try:
                os.link(src, dst)
            except OSError:  # another file system: copy
                shutil.copy2(src, dst)

        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(graph_dir, target, copy_function=link)
        graph_dir = target
    return str(graph_dir.relative_to(repository))
