"""EnsembleBackend: a two-step DAG over real backends, step order, timings and graph validation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.backends import context, export_mlp, mlp, mlp_rows
from harness.models import eager, write_python_model
from servelab.backends.base import Backend, Inputs, Outputs
from servelab.backends.ensemble import EnsembleBackend
from servelab.backends.onnxruntime import OnnxRuntimeBackend
from servelab.backends.python import PythonBackend
from servelab.errors import InvalidArgument, NotFound, ServelabError
from servelab.protocol import model_config_pb2 as mc

SCALE = """
class Model:
    def execute(self, requests):
        return [{"SCALED": r.get("V") * 10, "ROWSUM": r.get("V").sum(axis=1, keepdims=True)} for r in requests]
"""


def _ensemble_config(reverse: bool = False) -> mc.ModelConfig:
    config = mc.ModelConfig(name="pipe", platform="ensemble", max_batch_size=8)
    config.input.add(name="X", data_type=mc.TYPE_FP32, dims=[16])
    config.output.add(name="Z", data_type=mc.TYPE_FP32, dims=[8])
    config.output.add(name="S", data_type=mc.TYPE_FP32, dims=[1])
    first = mc.ModelEnsembling.Step(
        model_name="mlp", model_version=-1, input_map={"x": "X"}, output_map={"y": "H"}
    )
    second = mc.ModelEnsembling.Step(
        model_name="scale", model_version=1, input_map={"V": "H"}, output_map={"SCALED": "Z", "ROWSUM": "S"}
    )
    steps = [second, first] if reverse else [first, second]
    config.ensemble_scheduling.step.extend(steps)
    return config


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Backend]:
    root = tmp_path_factory.mktemp("ens")
    export_mlp("onnx", root / "mlp" / "1")
    ort_config = mc.ModelConfig(name="mlp")
    OnnxRuntimeBackend.autocomplete(ort_config, root / "mlp" / "1")
    write_python_model(root / "scale", SCALE)
    py_config = mc.ModelConfig(name="scale", max_batch_size=8)
    py_config.output.add(name="SCALED", data_type=mc.TYPE_FP32, dims=[8])
    backends: dict[str, Backend] = {
        "mlp": OnnxRuntimeBackend(context(ort_config, root / "mlp" / "1", name="mlp")),
        "scale": PythonBackend(context(py_config, root / "scale" / "1", name="scale")),
    }
    for backend in backends.values():
        backend.load()
    return backends


def _ensemble(
    models: dict[str, Backend], config: mc.ModelConfig, calls: list[tuple[str, str]]
) -> EnsembleBackend:
    def infer(name: str, version: str, inputs: Inputs) -> Outputs:
        calls.append((name, version))
        if name not in models:
            raise NotFound(f"model '{name}' not found")
        return models[name].infer(inputs)

    backend = EnsembleBackend(context(config, Path("/nonexistent"), name="pipe", infer=infer))
    backend.load()
    return backend


@pytest.mark.parametrize("reverse", [False, True])
def test_two_step_dag_runs_in_dependency_order(models: dict[str, Backend], reverse: bool) -> None:
    calls: list[tuple[str, str]] = []
    backend = _ensemble(models, _ensemble_config(reverse), calls)
    x = mlp_rows(4)
    out = backend.infer({"X": x})
    hidden = eager(mlp(), x)
    np.testing.assert_allclose(out["Z"], hidden * 10, atol=1e-4, rtol=0)
    np.testing.assert_allclose(out["S"], hidden.sum(axis=1, keepdims=True), atol=1e-4, rtol=0)
    assert list(out) == ["Z", "S"]
    assert calls == [("mlp", ""), ("scale", "1")]
    timings = backend.step_timings()
    assert [(t["model_name"], t["calls"]) for t in timings] == [("mlp", 1), ("scale", 1)]
    assert all(isinstance(t["total_ns"], int) and t["total_ns"] > 0 for t in timings)


def test_execute_three_requests_and_a_failing_step(models: dict[str, Backend]) -> None:
    backend = _ensemble(models, _ensemble_config(), [])
    reqs = [{"X": mlp_rows(n, seed=n)} for n in (1, 2, 3)]
    for req, res in zip(reqs, backend.execute(reqs), strict=True):
        assert isinstance(res, dict)
        np.testing.assert_allclose(res["Z"], eager(mlp(), req["X"]) * 10, atol=1e-4, rtol=0)
    config = _ensemble_config()
    config.ensemble_scheduling.step[1].model_name = "gone"
    (result,) = _ensemble(models, config, []).execute([{"X": mlp_rows(1)}])
    assert isinstance(result, NotFound) and "gone" in result.message


def _broken(edit: str) -> mc.ModelConfig:
    config = _ensemble_config()
    steps = config.ensemble_scheduling.step
    if edit == "unknown tensor":
        steps[1].input_map["V"] = "NOPE"
    elif edit == "output not produced":
        config.output.add(name="W", data_type=mc.TYPE_FP32, dims=[1])
    elif edit == "cycle":
        steps[0].input_map["extra"] = "S"
    elif edit == "two producers":
        steps[1].output_map["ROWSUM"] = "H"
    elif edit == "writes input":
        steps[0].output_map["y"] = "X"
    elif edit == "no steps":
        del steps[:]
    return config


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (
            "unknown tensor",
            r"step 1 \('scale'\) input 'V' reads tensor 'NOPE', which is neither an ensemble input",
        ),
        ("output not produced", "output 'W' is not produced by any step"),
        ("cycle", r"has a cycle: step 0 \('mlp'\) waits for \['S'\]"),
        ("two producers", r"tensor 'H' is produced by both step 0 \('mlp'\) and step 1 \('scale'\)"),
        ("writes input", "writes 'X', which is an ensemble input"),
        ("no steps", "ensemble 'pipe' has no ensemble_scheduling steps"),
    ],
)
def test_graph_errors_name_tensor_and_step(models: dict[str, Backend], edit: str, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        _ensemble(models, _broken(edit), [])


def test_needs_ctx_infer() -> None:
    backend = EnsembleBackend(context(_ensemble_config(), Path("/nonexistent"), name="pipe"))
    with pytest.raises(ServelabError, match=r"needs the server's infer function \(ctx.infer\)"):
        backend.load()
