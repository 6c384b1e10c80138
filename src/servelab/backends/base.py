"""The backend contract: load / execute a list of requests / unload.

A backend wraps one runtime for one model version. The scheduler hands it a list of requests, each a
dict of input name -> numpy array that already passed validation against the model's config; it
returns, per request, a dict of output name -> numpy array or a ServelabError that fails that request
alone. Tensor runtimes implement only :meth:`Backend.infer` on one (batched) input dict; the default
:meth:`Backend.execute` concatenates the requests once along the batch axis, calls ``infer`` and
splits the outputs back by row counts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from servelab.errors import InternalError, ServelabError
from servelab.protocol import model_config_pb2 as mc
from servelab.trust import version_file

__all__ = ["Backend", "BackendContext", "InferFn", "Inputs", "Outputs", "concat_rows", "param", "split_rows"]

Inputs = dict[str, np.ndarray]
Outputs = dict[str, np.ndarray]
#: Calls another model through the server: (model name, version or "", inputs) -> outputs.
InferFn = Callable[[str, str, Inputs], Outputs]


@dataclass
class BackendContext:
    """What a backend gets at construction: where its files are and how it is configured."""

    model_name: str
    version: int
    version_dir: Path
    config: mc.ModelConfig
    #: Threads the runtime may use for this instance (intra-op); derived from instances x cores.
    threads: int = 1
    #: Present for backends that call other models (ensembles, pipelines).
    infer: InferFn | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def model_path(self) -> Path:
        """The config's ``default_model_filename`` (checked to stay in the model's folder), else the version folder."""
        name = self.config.default_model_filename
        return version_file(self.version_dir, name, "default_model_filename") if name else self.version_dir


def param(config: mc.ModelConfig, key: str, default: str | None = None) -> str | None:
    """A string parameter from the config's ``parameters`` map, or ``default``."""
    if key in config.parameters:
        return config.parameters[key].string_value
    return default


def concat_rows(requests: list[Inputs]) -> tuple[Inputs, list[int]]:
    """Concatenate each input along axis 0 in one call; returns the batch and each request's rows."""
    first = requests[0]
    rows = [len(next(iter(r.values()))) if r else 0 for r in requests]
    batch = {name: np.concatenate([r[name] for r in requests], axis=0) for name in first}
    return batch, rows


def split_rows(outputs: Outputs, rows: list[int]) -> list[Outputs]:
    """Split batched outputs back into per-request dicts (views, no copies)."""
    bounds = np.cumsum(rows)[:-1]
    parts = {name: np.split(arr, bounds, axis=0) for name, arr in outputs.items()}
    return [{name: parts[name][i] for name in outputs} for i in range(len(rows))]


class Backend(ABC):
    """One model version on one runtime. Subclasses set ``kind`` and implement load and infer."""

    #: Name used in config.pbtxt ``backend:`` (e.g. "onnxruntime").
    kind: ClassVar[str] = ""
    #: Triton ``platform:`` names this backend answers to.
    platforms: ClassVar[tuple[str, ...]] = ()
    #: Model file (or folder) name in the version directory, when the config names none.
    default_filename: ClassVar[str] = ""
    #: False when the runtime holds the GIL while it computes (instances then want processes).
    releases_gil: ClassVar[bool] = True

    def __init__(self, ctx: BackendContext) -> None:
        self.ctx = ctx
        self.config = ctx.config

    @classmethod
    def autocomplete(cls, config: mc.ModelConfig, version_dir: Path) -> None:
        """Fill missing inputs, outputs and max_batch_size from the model file, in place.

        The default does nothing; the repository then reports what the config must state.
        """

    @abstractmethod
    def load(self) -> None:
        """Open the model file and get ready to infer (may warm up)."""

    @abstractmethod
    def infer(self, inputs: Inputs) -> Outputs:
        """Run one (possibly batched) input dict through the runtime; return every output."""

    def execute(self, requests: list[Inputs]) -> list[Outputs | ServelabError]:
        """Run several requests as one batch when the model batches, else one by one."""
        if len(requests) == 1:
            return [self._guarded(requests[0])]
        if self.config.max_batch_size > 0:
            try:
                batch, rows = concat_rows(requests)
                outputs = self.infer(batch)
            except Exception:
                # One bad request must not fail the others: run each alone to find it.
                return [self._guarded(r) for r in requests]
            return list(split_rows(outputs, rows))
        return [self._guarded(r) for r in requests]

    def _guarded(self, inputs: Inputs) -> Outputs | ServelabError:
        try:
            return self.infer(inputs)
        except ServelabError as exc:
            return exc
        except Exception as exc:  # runtime errors fail this request only
            return InternalError(f"{self.kind} failed on model '{self.ctx.model_name}': {exc}")

    def stage_stats(self) -> dict[str, Any]:
        """Cumulative time of the backend's own stages (e.g. sampling, gather, ensemble steps), if any.

        Reported under ``stages`` in the statistics extension and exported as metrics.
        """
        return {}

    def unload(self) -> None:
        """Release the runtime's resources."""
