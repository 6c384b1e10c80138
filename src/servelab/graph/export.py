"""Export SageLayers to ONNX, TorchScript and OpenVINO IR, and publish a GraphSAGE model repository.

Export-time only (it imports torch); serving reads the artefacts through :mod:`servelab.graph.sessions`.
:func:`export_repository` writes the models of :mod:`servelab.graph.configs` after the exported
layers (and the fused model's dense graph) pass :mod:`servelab.graph.parity`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
import warnings
from pathlib import Path

import torch

from servelab.graph import configs
from servelab.graph.dense import save_dense_onnx
from servelab.graph.model import SageLayers, load_model
from servelab.graph.parity import check_dense_parity, check_parity, example_block
from servelab.graph.sessions import INPUT_NAMES, OUTPUT_NAMES, RUNTIMES, load_runner
from servelab.graph.store import GraphStore

__all__ = ["export_artifact", "export_onnx", "export_openvino", "export_repository", "export_torchscript"]


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

    from servelab.backends.openvino_convert import convert_onnx

    xml_path = Path(xml_path)
    xml_path.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(convert_onnx(onnx_path), str(xml_path), compress_to_fp16=False)
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


def export_repository(
    model_dir: Path, graph_dir: Path, repository: Path, runtime: str = "onnxruntime", atol: float = 1e-5,
    fused_instances: int | None = None,
) -> dict[str, float]:
    """Write ``graphsage_sampler``, ``graphsage_layers`` (on ``runtime``), the ``sage`` ensemble and,
    for the mean aggregator, ``sage_fused`` (the same pipeline in one model call).

    The exported layers (and the fused model's dense graph) are checked against eager torch on random
    blocks before the configs are written; returns ``{"max_abs_diff": ...}`` (the worst of both).
    ``graph_dir`` is stored relative to the repository; a store outside it is linked into ``_graphs/``.
    ``fused_instances``: ``sage_fused``'s instance count (None: :func:`configs.fused_config`'s default).
    """
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
    artifact = export_artifact(model, runtime, repository / configs.LAYERS_MODEL / "1")
    blocks = [example_block(cfg.in_features, cfg.fanouts, batch=b, seed=b) for b in (1, 3, 32)]
    worst = check_parity(model, load_runner(runtime, artifact), blocks, atol=atol)
    graph = configs.graph_param(Path(graph_dir), repository)
    sizes = (cfg.in_features, cfg.hidden, cfg.num_classes)
    configs.write_config(repository, configs.layers_config(runtime, *sizes, cfg.fanouts))
    configs.write_config(repository, configs.sampler_config(graph, cfg.in_features, cfg.fanouts))
    configs.write_config(repository, configs.ensemble_config(*sizes))
    fused_dir = repository / configs.FUSED_MODEL
    if cfg.aggregator == "mean":
        dense = save_dense_onnx(model, fused_dir / "1" / "model.onnx")
        worst = max(worst, check_dense_parity(model, dense, atol=atol))
        configs.write_config(repository, configs.fused_config(runtime, graph, *sizes, cfg.fanouts, fused_instances))
    elif (fused_dir / "config.pbtxt").is_file():
        # a pooling model has no fused form: a sage_fused left by an earlier export would answer for the old one
        shutil.rmtree(fused_dir)
    return {"max_abs_diff": worst}
