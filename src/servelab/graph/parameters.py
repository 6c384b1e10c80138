"""Typed ``parameters`` of the GraphSAGE backends' config.pbtxt, on the schema base of backends/parameters.py.

The graph package is a plug-in: the server's layers may not name it, so its schemas live here and each
backend class declares its own (:attr:`servelab.backends.base.Backend.parameters`); tools that write
configs find them by backend name (:func:`servelab.backends.backend_parameters`). The export
(:mod:`servelab.graph.configs`) writes through the same classes that the backends read.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from servelab.backends.parameters import ModelParameters

__all__ = ["DEFAULT_FANOUTS", "FusedSageParameters", "GraphSamplerParameters"]

DEFAULT_FANOUTS = (10, 10)


class GraphSamplerParameters(ModelParameters):
    """The ``graphsage_sampler`` backend (graph/backend.py)."""

    reader: ClassVar[str] = "graphsage_sampler"
    written_always: ClassVar[tuple[str, ...]] = ("fanouts",)
    threads_field: ClassVar[str | None] = "threads"

    graph_dir: str | None = Field(
        None, description="Graph store folder relative to the model repository (required at load), e.g. _graphs/demo."
    )
    fanouts: tuple[int, int] = Field(DEFAULT_FANOUTS, description="Neighbours sampled per hop, 'hop1,hop2'.")
    sampler: Literal["numba", "python"] = Field(
        "numba", description="The compiled sampler, or the pure-Python reference (for baselines)."
    )
    seed: int = Field(0, description="Sampler seed.")
    threads: int | None = Field(
        None, ge=1, description="Numba threads for large batches; default: the instance's thread budget."
    )

    @field_validator("fanouts", mode="before")
    @classmethod
    def _hops(cls, value: Any) -> Any:
        text = ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)
        try:
            hop1, hop2 = (int(part) for part in text.split(","))
        except ValueError:
            raise ValueError("'hop1,hop2' (e.g. '10,10')") from None
        if hop1 < 1 or hop2 < 1:
            raise ValueError("'hop1,hop2' with two positive integers (e.g. '10,10')")
        return hop1, hop2

    @field_validator("sampler", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class FusedSageParameters(GraphSamplerParameters):
    """The ``graphsage`` backend (graph/fused.py): the sampler's keys and the dense graph's."""

    reader: ClassVar[str] = "graphsage"
    written_always: ClassVar[tuple[str, ...]] = ("fanouts", "runtime")
    threads_field: ClassVar[str | None] = "layers_threads"

    runtime: Literal["onnxruntime", "openvino"] = Field(
        "onnxruntime", description="What runs the dense graph (model.onnx)."
    )
    layers_threads: int = Field(
        1, ge=1, description="Intra-op threads of the dense graph; 1 serves concurrent small requests best on 2 cores."
    )
    parallel_from: int = Field(64, ge=1, description="Batch size from which the aggregation kernel runs in parallel.")

    @field_validator("runtime", mode="before")
    @classmethod
    def _lower_runtime(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value
