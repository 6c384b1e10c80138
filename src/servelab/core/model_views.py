"""What the data plane answers about a model without running it: metadata, platform names, statistics rows."""

from __future__ import annotations

from typing import Any

from servelab.core.records import LoadedVersion, ModelRecord
from servelab.core.workers import WorkerInstance
from servelab.protocol import model_config_pb2 as mc

__all__ = ["model_metadata", "platform", "version_stats"]


def model_metadata(name: str, lv: LoadedVersion, record: ModelRecord) -> dict[str, Any]:
    """OIP model metadata of ``lv`` (the version routing resolved), listing every loaded version."""
    sig = lv.signature

    def shape(dims: tuple[int, ...]) -> list[int]:
        return ([-1] if sig.batched else []) + list(dims)

    return {
        "name": name,
        "versions": [str(v) for v in sorted(record.versions)],
        "platform": platform(lv.config),
        "inputs": [{"name": s.name, "datatype": s.datatype.value, "shape": shape(s.dims)} for s in sig.inputs.values()],
        "outputs": [
            {"name": s.name, "datatype": s.datatype.value, "shape": shape(s.dims)} for s in sig.outputs.values()
        ],
    }


def version_stats(lv: LoadedVersion) -> dict[str, Any]:
    """One ``model_stats`` row: Triton's statistics, plus backend stages and worker processes when any."""
    row = lv.stats.as_dict()
    stages = [s for s in (b.stage_stats() for b in lv.instances) if s]
    if stages:
        row["stages"] = stages[0] if len(stages) == 1 else stages
    workers = [b.describe() for b in lv.instances if isinstance(b, WorkerInstance)]
    if workers:  # worker processes: pid, state, restarts, last exit
        row["workers"] = workers
    return row


def platform(config: mc.ModelConfig) -> str:
    """The platform name Triton reports for a config that names only its backend."""
    if config.platform:
        return config.platform
    return {
        "onnxruntime": "onnxruntime_onnx",
        "pytorch": "pytorch_libtorch",
        "tensorrt": "tensorrt_plan",
        "tensorflow": "tensorflow_savedmodel",
    }.get(config.backend, config.backend)
