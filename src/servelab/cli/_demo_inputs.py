"""Inputs the demo feeds each model: ones the model accepts, not merely ones of the right shape.

Most models take any values of the declared type and shape, so random ones shaped from the metadata do
(required inputs only: an ``optional`` input is left out, as a first request would). A model that is a
later step of an ensemble (``graphsage_layers`` after ``graphsage_sampler`` in ``sage``) expects what the
earlier steps produce (row indices into ``x`` for ``nbr1`` / ``nbr2``), which random integers are not;
it gets exactly that, by running the ensemble's earlier steps on the ensemble's own sample inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from servelab.types import DataType

if TYPE_CHECKING:
    from servelab.engine import Engine

__all__ = ["DemoInputs", "demo_inputs", "sample_inputs"]

#: integer inputs are drawn from [0, _INT_HIGH); node ids from [0, _NODE_IDS_HIGH) (graphs have more nodes)
_INT_HIGH = 10
_NODE_IDS_HIGH = 100


@dataclass(frozen=True)
class DemoInputs:
    """The arrays for one model and where they came from (shown in the demo's table)."""

    arrays: dict[str, np.ndarray]
    source: str = "random"


def _optional(config: dict[str, Any]) -> set[str]:
    return {i["name"] for i in config.get("input", []) if i.get("optional")}


def sample_inputs(
    meta: dict[str, Any], config: dict[str, Any] | None = None, batch: int = 1, seed: int = 0
) -> dict[str, np.ndarray]:
    """Random values shaped from model metadata (-1 dims become ``batch`` first, then 4); optional inputs
    named in ``config`` are left out."""
    rng = np.random.default_rng(seed)
    skip = _optional(config or {})
    out: dict[str, np.ndarray] = {}
    for spec in meta["inputs"]:
        if spec["name"] in skip:
            continue
        dt = DataType(spec["datatype"])
        shape = [batch if i == 0 and d == -1 else (4 if d == -1 else d) for i, d in enumerate(spec["shape"])]
        if dt is DataType.BYTES:
            out[spec["name"]] = np.array([b"servelab"] * int(np.prod(shape)), dtype=object).reshape(shape)
        elif dt is DataType.BOOL:
            out[spec["name"]] = rng.integers(0, 2, shape).astype(bool)
        elif dt.numpy_dtype.kind in "iu":
            high = _NODE_IDS_HIGH if spec["name"] == "node_ids" else _INT_HIGH
            out[spec["name"]] = rng.integers(0, high, shape).astype(dt.numpy_dtype)
        else:
            out[spec["name"]] = rng.standard_normal(shape).astype(dt.numpy_dtype)
    return out


def _steps(config: dict[str, Any]) -> list[dict[str, Any]]:
    return list(config.get("ensemble_scheduling", {}).get("step", []))


def _feeding_ensemble(engine: Engine, name: str, ensembles: list[str]) -> tuple[str, int] | None:
    """(ensemble, step index) of the first ensemble that runs ``name`` after another step."""
    for ensemble in ensembles:
        for index, step in enumerate(_steps(engine.get_model_config(ensemble))):
            if index > 0 and step.get("model_name") == name:
                return ensemble, index
    return None


def _from_ensemble(engine: Engine, ensemble: str, index: int) -> dict[str, np.ndarray]:
    """Run ``ensemble``'s steps before ``index`` on its sample inputs; the tensors step ``index`` receives."""
    config = engine.get_model_config(ensemble)
    tensors = sample_inputs(engine.get_model_metadata(ensemble), config)
    steps = _steps(config)
    for step in steps[:index]:
        feed = {inp: tensors[t] for inp, t in step.get("input_map", {}).items() if t in tensors}
        result = engine.infer(step["model_name"], feed)
        tensors.update({t: result[out] for out, t in step.get("output_map", {}).items() if out in result})
    return {inp: tensors[t] for inp, t in steps[index].get("input_map", {}).items() if t in tensors}


def demo_inputs(engine: Engine, name: str, ensembles: list[str]) -> DemoInputs:
    """Inputs ``name`` accepts: from the ensemble that feeds it, if one does (``ensembles`` are the READY
    ones), else random ones from its metadata. Errors of the earlier steps propagate (ServelabError)."""
    fed = _feeding_ensemble(engine, name, ensembles)
    if fed is not None:
        ensemble, index = fed
        previous = _steps(engine.get_model_config(ensemble))[index - 1]["model_name"]
        arrays = _from_ensemble(engine, ensemble, index)
        order = [spec["name"] for spec in engine.get_model_metadata(name)["inputs"]]
        arrays = {k: arrays[k] for k in sorted(arrays, key=lambda k: order.index(k) if k in order else len(order))}
        return DemoInputs(arrays, f"from {previous} in {ensemble}")
    return DemoInputs(sample_inputs(engine.get_model_metadata(name), engine.get_model_config(name)))
