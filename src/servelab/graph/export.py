"""Export SageLayers to ONNX, TorchScript and OpenVINO IR, load them back, and check parity with eager.

Every artefact takes (x float32 [n_all, F], nbr1 int64 [n1, f1], nbr2 int64 [B, f2]) and returns
(logits [B, C], embeddings [B, hidden]) with n_all, n1 and B dynamic. :func:`export_repository`
writes a Triton-style model repository: the sampler, the layers and a ``sage`` ensemble over both.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from google.protobuf import text_format

from servelab.graph.model import SageLayers, load_model
from servelab.protocol import model_config_pb2 as mc

__all__ = [
    "INPUT_NAMES",
    "OUTPUT_NAMES",
    "RUNTIMES",
    "LayersFn",
    "ParityError",
    "check_parity",
    "example_block",
    "export_artifact",
    "export_onnx",
    "export_openvino",
    "export_repository",
    "export_torchscript",
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


class ParityError(AssertionError):
    """An exported artefact disagrees with eager torch beyond the tolerance."""


def example_block(
    in_features: int, fanouts: tuple[int, int], batch: int = 4, hop1: int = 7, hop2: int = 9, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random padded block (x, nbr1, nbr2) with some padding and some degree-0 rows."""
    rng = np.random.default_rng(seed)
    n1, n_all = batch + hop1, batch + hop1 + hop2
    x = rng.standard_normal((n_all, in_features), dtype=np.float32)
    nbr1 = rng.integers(0, n_all, size=(n1, fanouts[1]), dtype=np.int64)
    nbr2 = rng.integers(0, n1, size=(batch, fanouts[0]), dtype=np.int64)
    nbr1[rng.random(nbr1.shape) < 0.3] = n_all  # padding
    nbr2[rng.random(nbr2.shape) < 0.3] = n1
    nbr1[-1] = n_all  # a node without neighbours
    nbr2[-1] = n1
    return x, nbr1, nbr2


def _eager(model: SageLayers) -> LayersFn:
    def run(x: np.ndarray, nbr1: np.ndarray, nbr2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with torch.inference_mode():
            logits, emb = model(torch.from_numpy(x), torch.from_numpy(nbr1), torch.from_numpy(nbr2))
        return logits.numpy(), emb.numpy()

    return run


def export_onnx(model: SageLayers, path: Path) -> Path:
    """Write ``model`` to ONNX with dynamic n_all / n1 / B (torch.export based exporter)."""
    cfg = model.config
    example = tuple(torch.from_numpy(a) for a in example_block(cfg.in_features, cfg.fanouts))
    dims: dict[str, dict[int, object]] = {
        "x": {0: torch.export.Dim("n_all", min=2)},
        "nbr1": {0: torch.export.Dim("n1", min=2)},
        "nbr2": {0: torch.export.Dim("batch", min=2)},
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The exporter prints progress lines and warns about optional torchvision ops: keep it quiet.
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        _quiet_export(model, example, path, dims)
    finally:
        quiet.setLevel(level)
    return path


def _quiet_export(
    model: SageLayers, example: tuple[torch.Tensor, ...], path: Path, dims: dict[str, dict[int, object]]
) -> None:
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model.eval(),
            example,
            str(path),
            input_names=list(INPUT_NAMES),
            output_names=list(OUTPUT_NAMES),
            dynamic_shapes=dims,
            dynamo=True,
            external_data=False,
        )


def export_torchscript(model: SageLayers, path: Path) -> Path:
    """Write ``model`` as a scripted TorchScript module (what Triton's pytorch backend loads)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # jit.script is deprecated but still the format
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.script(model.eval())
    scripted.save(str(path))
    return path


def export_openvino(onnx_path: Path, xml_path: Path) -> Path:
    """Convert an ONNX file to OpenVINO IR (model.xml + model.bin), keeping float32 weights."""
    import openvino as ov

    xml_path = Path(xml_path)
    xml_path.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov.convert_model(str(onnx_path)), str(xml_path), compress_to_fp16=False)
    return xml_path


def export_artifact(model: SageLayers, runtime: str, out_dir: Path) -> Path:
    """Write the artefact for ``runtime`` into ``out_dir`` under its standard file name."""
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime must be one of {sorted(RUNTIMES)}, got {runtime!r}")
    out_dir = Path(out_dir)
    target = out_dir / RUNTIMES[runtime]
    if runtime == "onnxruntime":
        return export_onnx(model, target)
    if runtime == "torch":
        return export_torchscript(model, target)
    onnx_path = export_onnx(model, out_dir / "_tmp_model.onnx")
    try:
        return export_openvino(onnx_path, target)
    finally:
        onnx_path.unlink(missing_ok=True)


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

    config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
    return ov.Core().compile_model(str(path), "CPU", config)


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
    torch.set_num_threads(threads)  # process-wide: torch has no per-module thread pool
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # jit.load is deprecated, still the format
        scripted = torch.jit.load(str(path))
    return _eager(scripted.eval())  # type: ignore[arg-type]


def load_runner(runtime: str, path: Path, threads: int = 1) -> LayersFn:
    """A numpy-in, numpy-out callable over an exported artefact, or eager torch for ``torch-eager``."""
    loaders = {"onnxruntime": _onnx_runner, "openvino": _openvino_runner, "torch": _torchscript_runner}
    if runtime not in loaders:
        raise ValueError(f"runtime must be one of {sorted(loaders)}, got {runtime!r}")
    return loaders[runtime](Path(path), threads)


def eager_runner(model: SageLayers) -> LayersFn:
    """Eager torch over the in-memory model, numpy in and out."""
    return _eager(model.eval())


def check_parity(
    model: SageLayers,
    runner: LayersFn,
    blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    atol: float = 1e-5,
) -> float:
    """Largest |exported - eager| over ``blocks``; raises :class:`ParityError` above ``atol``."""
    eager = _eager(model.eval())
    worst = 0.0
    for block in blocks:
        for name, got, want in zip(OUTPUT_NAMES, runner(*block), eager(*block), strict=True):
            if got.shape != want.shape:
                raise ParityError(f"{name}: shape {got.shape} from the export, {want.shape} from eager")
            worst = max(worst, float(np.max(np.abs(got - want), initial=0.0)))
    if worst > atol:
        raise ParityError(f"exported model differs from eager by {worst:.3g} (tolerance {atol:g})")
    return worst


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


def _sampler_config(graph_dir: str, features: int, fanouts: tuple[int, int]) -> mc.ModelConfig:
    cfg = mc.ModelConfig(name=SAMPLER_MODEL, backend="graphsage_sampler", max_batch_size=0)
    cfg.input.extend(_graph_inputs(features))
    cfg.output.extend(
        [
            mc.ModelOutput(name="x", data_type=mc.TYPE_FP32, dims=[-1, features]),
            mc.ModelOutput(name="nbr1", data_type=mc.TYPE_INT64, dims=[-1, fanouts[1]]),
            mc.ModelOutput(name="nbr2", data_type=mc.TYPE_INT64, dims=[-1, fanouts[0]]),
        ]
    )
    cfg.parameters["graph_dir"].string_value = graph_dir
    cfg.parameters["fanouts"].string_value = f"{fanouts[0]},{fanouts[1]}"
    return cfg


def _layers_config(
    runtime: str, features: int, hidden: int, classes: int, fanouts: tuple[int, int]
) -> mc.ModelConfig:
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
        cfg.parameters["allow_spinning"].string_value = "0"
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


def _ensemble_config(features: int, hidden: int, classes: int) -> mc.ModelConfig:
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


def _fused_config(runtime: str, graph_dir: str, features: int, hidden: int, classes: int,
                  fanouts: tuple[int, int]) -> mc.ModelConfig:  # fmt: skip
    cfg = mc.ModelConfig(name=FUSED_MODEL, backend="graphsage", max_batch_size=0, default_model_filename="model.onnx")
    cfg.input.extend(_graph_inputs(features))
    cfg.output.extend(_sage_outputs(hidden, classes))
    cfg.parameters["graph_dir"].string_value = graph_dir
    cfg.parameters["fanouts"].string_value = f"{fanouts[0]},{fanouts[1]}"
    # the dense graph is ONNX: OpenVINO reads it directly; torch layers fall back to ONNX Runtime here
    cfg.parameters["runtime"].string_value = "openvino" if runtime == "openvino" else "onnxruntime"
    return cfg


def _write_config(repository: Path, cfg: mc.ModelConfig) -> Path:
    model_dir = repository / cfg.name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    path = model_dir / "config.pbtxt"
    path.write_text(text_format.MessageToString(cfg))
    return path


#: where a graph store from outside the repository is linked to (the scanner skips '_' folders)
GRAPHS_SUBDIR = "_graphs"


def _graph_param(graph_dir: Path, repository: Path) -> str:
    """``graph_dir`` relative to the repository: the server opens graph stores only inside it
    (:mod:`servelab.trust`), so a store elsewhere is hard-linked (else copied) to ``_graphs/<name>``."""
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


def export_repository(
    model_dir: Path, graph_dir: Path, repository: Path, runtime: str = "onnxruntime", atol: float = 1e-5
) -> dict[str, float]:
    """Write ``graphsage_sampler``, ``graphsage_layers`` (on ``runtime``), the ``sage`` ensemble and,
    for the mean aggregator, ``sage_fused`` (the same pipeline in one model call).

    The exported layers (and the fused model's dense graph) are checked against eager torch on random
    blocks before the configs are written; returns ``{"max_abs_diff": ...}`` (the worst of both).
    ``graph_dir`` is stored relative to the repository; a store outside it is linked into ``_graphs/``.
    """
    from servelab.graph.store import GraphStore

    if runtime not in RUNTIMES:
        raise ValueError(f"runtime must be one of {sorted(RUNTIMES)}, got {runtime!r}")
    model, _ = load_model(Path(model_dir))
    cfg = model.config
    store = GraphStore.open(Path(graph_dir))
    if store.num_features != cfg.in_features:
        raise ValueError(
            f"graph {graph_dir} has {store.num_features} features per node, the model expects {cfg.in_features}"
        )
    repository = Path(repository)
    version_dir = repository / LAYERS_MODEL / "1"
    artifact = export_artifact(model, runtime, version_dir)
    blocks = [example_block(cfg.in_features, cfg.fanouts, batch=b, seed=b) for b in (1, 3, 32)]
    worst = check_parity(model, load_runner(runtime, artifact), blocks, atol=atol)
    _write_config(
        repository, _layers_config(runtime, cfg.in_features, cfg.hidden, cfg.num_classes, cfg.fanouts)
    )
    graph = _graph_param(Path(graph_dir), repository)  # once: it may link the store into the repository
    _write_config(repository, _sampler_config(graph, cfg.in_features, cfg.fanouts))
    _write_config(repository, _ensemble_config(cfg.in_features, cfg.hidden, cfg.num_classes))
    if cfg.aggregator == "mean":
        from servelab.graph.dense import check_dense_parity, save_dense_onnx

        dense = save_dense_onnx(model, repository / FUSED_MODEL / "1" / "model.onnx")
        worst = max(worst, check_dense_parity(model, dense, atol=atol))
        _write_config(
            repository, _fused_config(runtime, graph, cfg.in_features, cfg.hidden, cfg.num_classes, cfg.fanouts)
        )
    elif (repository / FUSED_MODEL / "config.pbtxt").is_file():
        # a pooling model has no fused form: a sage_fused left by an earlier export would answer for the old one
        shutil.rmtree(repository / FUSED_MODEL)
    return {"max_abs_diff": worst}
