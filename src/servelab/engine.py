"""The in-process API: ``servelab.Engine("path/to/repo")``, no server, same data plane as the servers."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from servelab.config.settings import ControlMode
from servelab.core.dataplane import DataPlane
from servelab.core.registry import ModelRegistry, SchedulerFactory
from servelab.repository import ModelRepository, config_to_dict

__all__ = ["Engine"]


def _as_array(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    array = np.asarray(value)
    if array.dtype.kind in ("U", "S"):
        return np.vectorize(lambda s: s.encode() if isinstance(s, str) else bytes(s), otypes=[object])(array)
    return array


class Engine:
    """Load a Triton-style model repository and run inference in this process.

    By default every model is loaded at start and ``load_model`` / ``unload_model`` work (Triton's
    ``--model-control-mode explicit --load-model '*'``). ``model_control_mode="poll"`` also picks up
    changes on disk every ``poll_secs``.

    ``allow_custom_backends`` is on by default here, unlike ``servelab serve``: the embedding program
    already runs its own Python, and configs reach an Engine only from that program, so a
    ``backend: "module:Class"`` can import nothing the program could not import itself. Pass False
    when an Engine loads configs that someone else wrote.
    """

    def __init__(
        self,
        repository: str | Path | list[str | Path],
        *,
        model_control_mode: str | ControlMode = ControlMode.EXPLICIT,
        load_models: list[str] | None = None,
        poll_secs: float = 15.0,
        scheduler_factory: SchedulerFactory | None = None,
        allow_custom_backends: bool = True,
    ) -> None:
        roots = [Path(p) for p in repository] if isinstance(repository, list) else [Path(repository)]
        mode = ControlMode(model_control_mode)
        kwargs: dict[str, Any] = {}
        if scheduler_factory is not None:
            kwargs["scheduler_factory"] = scheduler_factory
        repo = ModelRepository(roots, allow_custom_backends=allow_custom_backends)
        registry = ModelRegistry(repo, mode, poll_secs=poll_secs, **kwargs)
        self.dataplane = DataPlane(registry)
        self.dataplane.startup(load_models if load_models is not None else ["*"])

    # ----- inference -----
    def infer(
        self,
        model: str,
        inputs: Mapping[str, Any],
        version: str | int | None = None,
        outputs: list[str] | None = None,
    ) -> dict[str, np.ndarray]:
        """Run ``model`` on named inputs (numpy arrays or array-likes); returns output name -> array."""
        arrays = {name: _as_array(value) for name, value in inputs.items()}
        return self.dataplane.infer_arrays(model, arrays, "" if version is None else str(version), outputs)

    # ----- health and metadata -----
    def is_server_live(self) -> bool:
        return self.dataplane.live()

    def is_server_ready(self) -> bool:
        return self.dataplane.ready()

    def is_model_ready(self, model: str, version: str | int | None = None) -> bool:
        return self.dataplane.model_ready(model, "" if version is None else str(version))

    def get_model_metadata(self, model: str, version: str | int | None = None) -> dict[str, Any]:
        return self.dataplane.model_metadata(model, "" if version is None else str(version))

    def get_model_config(self, model: str, version: str | int | None = None) -> dict[str, Any]:
        return config_to_dict(self.dataplane.model_config(model, "" if version is None else str(version)))

    def get_inference_statistics(self, model: str = "", version: str | int | None = None) -> dict[str, Any]:
        return self.dataplane.statistics(model, "" if version is None else str(version))

    def get_model_repository_index(self) -> list[dict[str, str]]:
        return self.dataplane.repository_index()

    # ----- repository control -----
    def load_model(self, model: str, config: str | None = None) -> None:
        """Load or reload ``model``; ``config`` is an optional JSON ModelConfig overriding config.pbtxt."""
        self.dataplane.load_model(model, config)

    def unload_model(self, model: str) -> None:
        self.dataplane.unload_model(model)

    def close(self) -> None:
        self.dataplane.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
