"""The one shape every ``servelab convert`` source is loaded into: its kind, tensors, outputs and reference.

:class:`Source` is what the loaders of each kind (:mod:`servelab.convert.torch_sources`,
:mod:`servelab.convert.tabular_sources`, ONNX in :mod:`servelab.convert.sources`) return, and what export,
quantisation and the parity checks read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from servelab.types import DataType

__all__ = ["TABULAR_KINDS", "TORCH_KINDS", "Source", "SourceKind", "Task", "TensorInfo"]

SourceKind = Literal["torchscript", "torch_export", "python", "onnx", "sklearn", "lightgbm", "xgboost"]
TORCH_KINDS: tuple[str, ...] = ("torchscript", "torch_export", "python")
TABULAR_KINDS: tuple[str, ...] = ("sklearn", "lightgbm", "xgboost")
Task = Literal["classifier", "regressor", "other"]


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One model tensor: full shape with -1 for a dynamic dimension (the batch axis first when it batches)."""

    name: str
    dtype: DataType
    shape: tuple[int, ...]

    @property
    def dims(self) -> tuple[int, ...]:
        """The shape without the batch dimension (config.pbtxt ``dims`` when the model batches)."""
        return self.shape[1:]


@dataclass
class Source:
    """A loaded source model and how to run it as the reference."""

    kind: SourceKind
    path: Path
    inputs: list[TensorInfo]
    output_names: list[str]
    task: Task = "other"
    module: Any = None  # torch.nn.Module for torch kinds
    estimator: Any = None  # the fitted scikit-learn / LightGBM / XGBoost model
    #: False when the first axis is not a batch axis shared by every tensor (the file's max_batch_size = 0)
    batches: bool = True
    #: the file's own example request (``example_inputs()``), in input order: export traces it
    examples: list[np.ndarray] | None = None
    #: the file's ``dynamic_axes`` ({tensor: {axis: name}}), for export
    dynamic_axes: dict[str, dict[int, str]] | None = None
    _run: Callable[[dict[str, np.ndarray]], list[np.ndarray]] | None = field(default=None, repr=False)

    @property
    def is_torch(self) -> bool:
        return self.kind in TORCH_KINDS

    def reference(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The source's own outputs for ``feed`` (one array per output name, batch axis first)."""
        assert self._run is not None
        return self._run(feed)
