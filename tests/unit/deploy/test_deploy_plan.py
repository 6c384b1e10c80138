"""servelab.deploy.plan: replicas, autoscaling, resources and companions read from a repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.config.settings import DeploySettings
from servelab.deploy.plan import ModelPlan, plan_repository
from servelab.errors import InvalidArgument


def _model(root: Path, name: str, body: str) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(f'name: "{name}"\n{body}')


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _model(tmp_path, "a", 'platform: "onnxruntime_onnx"\nmax_batch_size: 8\ninstance_group [ { count: 3, kind: KIND_CPU } ]\n')
    _model(tmp_path, "b", 'platform: "onnxruntime_onnx"\n')
    _model(tmp_path, "g", 'platform: "onnxruntime_onnx"\nmax_batch_size: 4\ninstance_group [ { count: 2, kind: KIND_GPU, gpus: [0] } ]\n')
    steps = "".join(f'{{ model_name: "{m}" model_version: -1 }},' for m in ("a", "inner"))
    _model(tmp_path, "inner", 'platform: "ensemble"\nensemble_scheduling { step [ { model_name: "b" model_version: -1 } ] }\n')
    _model(tmp_path, "outer", f'platform: "ensemble"\nensemble_scheduling {{ step [ {steps.rstrip(",")} ] }}\n')
    return tmp_path


def _plans(repo: Path, **settings: object) -> dict[str, ModelPlan]:
    return {p.name: p for p in plan_repository([repo], DeploySettings.model_validate(settings))}


def test_replicas_run_the_instance_groups_as_written(repo: Path) -> None:
    plans = _plans(repo)
    a = plans["a"]
    assert a.num_replicas == 1 and a.num_cpus == 3.0 and a.num_gpus == 0.0
    assert a.max_ongoing_requests == 2 * 8 * 3  # two full batches per instance
    assert plans["b"].max_ongoing_requests == 16  # Ray's default (5) would starve batching
    assert plans["g"].num_gpus == 2.0 and plans["g"].num_cpus == 0.0
    assert a.route_prefix == "/v2/models/a"


def test_instances_as_replicas_spreads_them(repo: Path) -> None:
    a = _plans(repo, instances_as_replicas=True, cpus_per_instance=0.5)["a"]
    assert a.num_replicas == 3 and a.single_instance and a.num_cpus == 0.5


def test_an_ensemble_carries_its_steps_transitively(repo: Path) -> None:
    assert _plans(repo)["outer"].load == ("a", "b", "inner", "outer")


def test_per_model_overrides_and_autoscaling(repo: Path) -> None:
    plans = _plans(repo, models={"b": {"num_replicas": 4}, "a": {"autoscaling": {"min_replicas": 1, "max_replicas": 5}}})
    assert plans["b"].deployment_options()["num_replicas"] == 4
    options = plans["a"].deployment_options()
    assert "num_replicas" not in options
    assert options["autoscaling_config"] == {
        "min_replicas": 1, "max_replicas": 5, "initial_replicas": 1, "target_ongoing_requests": 24.0,
    }  # fmt: skip
    assert options["ray_actor_options"] == {"num_cpus": 3.0, "num_gpus": 0.0}


def test_errors_name_what_to_change(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"deploy.models names \['nosuch'\]"):
        _plans(repo, models={"nosuch": {"num_replicas": 2}})
    _model(repo, "with space", 'platform: "onnxruntime_onnx"\n')
    with pytest.raises(InvalidArgument, match="with space.*Rename its folder"):
        _plans(repo)
    with pytest.raises(ValueError, match="max_replicas"):
        DeploySettings(models={"a": {"autoscaling": {"min_replicas": 3, "max_replicas": 2}}})
