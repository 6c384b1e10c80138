"""The router inside a data plane (no sockets): labels and defaults, TF Serving's labels as routing labels,
ensemble steps and BLS calls re-entering at the router, a rollout resumed from sqlite, and its metrics."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from harness.repository import scale_model, write_config
from servelab.config.settings import ControlMode, RoutingSettings
from servelab.core.dataplane import DataPlane
from servelab.core.registry import ModelRegistry
from servelab.errors import InvalidArgument, NotFound, ServelabError
from servelab.metrics import ROUTING_METRICS, ServerMetrics, render
from servelab.repository import ModelRepository
from servelab.repository.tfserving_layout import PARAM_LABELS

X = np.ones((1, 4), np.float32)
ALL_VERSIONS = "version_policy: { all: {} }\n"


def _dataplane(repo: Path, **routing: object) -> DataPlane:
    settings = RoutingSettings.model_validate({"evaluate_every_s": 0.05, **routing})
    dataplane = DataPlane(ModelRegistry(ModelRepository([repo]), ControlMode.EXPLICIT, cores=1), routing=settings)
    dataplane.startup(["*"])
    return dataplane


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    scale_model(tmp_path, "m", {1: 1.0, 2: 2.0, 3: 3.0}, ALL_VERSIONS)
    (tmp_path / "m" / "routing.yaml").write_text("default: stable\nlabels: {stable: 1, canary: 2}\n")
    return tmp_path


@pytest.fixture
def dp(repo: Path) -> Iterator[DataPlane]:
    dataplane = _dataplane(repo)
    yield dataplane
    dataplane.close()


def _y(dp: DataPlane, version: str = "", name: str = "m") -> float:
    return float(dp.infer_arrays(name, {"x": X}, version)["y"][0, 0])


def test_labels_go_wherever_a_version_goes_and_the_default_follows_the_policy(dp: DataPlane) -> None:
    assert _y(dp) == 1.0  # default: stable, although 3 is the newest
    assert (_y(dp, "canary"), _y(dp, "stable"), _y(dp, "3")) == (2.0, 1.0, 3.0)
    assert dp.model_metadata("m", "canary")["name"] == "m" and dp.model_ready("m", "canary")
    assert dp.resolve_version("m") == "1" and dp.labels("m") == {"stable": 1, "canary": 2}
    assert dp.statistics("m", "canary")["model_stats"][0]["version"] == "2"
    with pytest.raises(NotFound, match=r"model 'm' has no version label 'beta'; its labels: \['canary', 'stable'\]"):
        _y(dp, "beta")
    with pytest.raises(NotFound, match=r"'m' version 7 is not found; loaded versions: \[1, 2, 3\]"):
        _y(dp, "7")
    with pytest.raises(InvalidArgument, match="model version 'a b' is not valid: expected a version number"):
        _y(dp, "a b")
    assert not dp.model_ready("m", "beta")


def test_set_default_pins_every_front_door_and_persists(dp: DataPlane) -> None:
    dp.set_default_version("m", "3")
    assert _y(dp) == 3.0 and dp.resolve_version("m") == "3"
    dp.set_default_version("m", None)
    assert _y(dp) == 1.0  # back to the policy's default
    assert [h["event"] for h in dp.rollout_status("m")["history"]] == ["set_default", "set_default"]
    with pytest.raises(NotFound):
        dp.set_default_version("m", "nolabel")


def test_tf_serving_version_labels_are_routing_labels(tmp_path: Path) -> None:
    labels = '{\\"stable\\": 1, \\"canary\\": 2}'
    config = ALL_VERSIONS + f'parameters {{ key: "{PARAM_LABELS}" value {{ string_value: "{labels}" }} }}\n'
    scale_model(tmp_path, "lin", {1: 1.0, 2: 2.0}, config)
    dataplane = _dataplane(tmp_path)
    try:
        assert (_y(dataplane, "stable", "lin"), _y(dataplane, "canary", "lin")) == (1.0, 2.0)
        assert _y(dataplane, "", "lin") == 2.0  # labels alone do not move the default (TF Serving: latest)
    finally:
        dataplane.close()
    (tmp_path / "lin" / "routing.yaml").write_text("labels: {canary: 1}\n")  # the policy file wins over TF's
    dataplane = _dataplane(tmp_path)
    try:
        assert _y(dataplane, "canary", "lin") == 1.0
    finally:
        dataplane.close()


def test_a_policy_naming_a_version_that_is_not_served_fails_the_load(tmp_path: Path) -> None:
    scale_model(tmp_path, "m", {1: 1.0})
    (tmp_path / "m" / "routing.yaml").write_text("labels: {canary: 2}\n")
    dataplane = _dataplane(tmp_path)
    try:
        with pytest.raises(ServelabError, match=r"not ready .*routing policy names versions that are not served: "
                                                r"\{'labels.canary': 2\}; served versions: \[1\]"):
            _y(dataplane)
        with pytest.raises(InvalidArgument, match="labels.canary"):
            dataplane.load_model("m")
    finally:
        dataplane.close()


def _ensemble(repo: Path, name: str, step_model: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    write_config(repo / name, f'''\
        name: "{name}"
        platform: "ensemble"
        max_batch_size: 8
        input [{{ name: "x" data_type: TYPE_FP32 dims: [4] }}]
        output [{{ name: "out" data_type: TYPE_FP32 dims: [4] }}]
        ensemble_scheduling {{ step [{{ model_name: "{step_model}" model_version: -1
          input_map {{ key: "x" value: "x" }} output_map {{ key: "y" value: "out" }} }}] }}
    ''')


def test_ensemble_steps_re_enter_at_the_router(repo: Path) -> None:
    _ensemble(repo, "ens", "m")
    dataplane = _dataplane(repo)
    try:
        ens = dataplane.router.resolve("ens")
        assert ens.instances[0].ctx.infer == dataplane._internal_infer  # what ensembles and BLS calls use
        assert dataplane.infer_arrays("ens", {"x": X})["out"][0, 0] == 1.0  # the step took m's default
        dataplane.start_rollout("m", {"candidate": "canary", "steps": [100], "min_dwell_s": 3600, "agreement_sample": 0})
        assert dataplane.infer_arrays("ens", {"x": X})["out"][0, 0] == 2.0  # and now the rollout's canary
        status = dataplane.rollout_status("m")
        assert {(v["variant"], v["version"]) for v in status["variants"]} >= {("default", 1), ("canary", 2)}
    finally:
        dataplane.close()


def test_a_rollout_resumes_from_sqlite_at_its_step(repo: Path, tmp_path: Path) -> None:
    db = tmp_path / "routing.sqlite"
    dataplane = _dataplane(repo, state_db=db)
    try:
        dataplane.start_rollout("m", {"candidate": "canary", "min_dwell_s": 3600, "auto": False, "agreement_sample": 0,
                                      "gates": {"p99_slack_ms": 1000}})
        status = dataplane.rollout_action("m", "promote")["rollout"]  # by hand: 5% -> 20%
        assert (status["step"], status["percent"], status["stable"], status["candidate"]) == (1, 20.0, 1, 2)
        dataplane.rollout_action("m", "pause")
    finally:
        dataplane.close()
    again = _dataplane(repo, state_db=db)
    try:
        status = again.rollout_status("m")["rollout"]
        assert (status["step"], status["percent"], status["status"]) == (1, 20.0, "paused")
        events = [h["event"] for h in again.rollout_status("m")["history"]]
        assert events == ["start", "advance", "pause", "resumed"]
        answers = [_y(again) for _ in range(400)]
        assert set(answers) == {1.0, 2.0} and 0.1 < answers.count(2.0) / 400 < 0.3  # 20%, never 100%
        assert again.rollout_action("m", "abort")["rollout"]["status"] == "aborted"
        assert {_y(again) for _ in range(20)} == {1.0}
    finally:
        again.close()


def _drain(dataplane: DataPlane) -> None:
    """Wait (bounded) until every shadow copy sent so far has run."""
    deadline = time.monotonic() + 30
    while dataplane.router.shadows.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)


def test_routing_metrics_are_labelled_by_variant(repo: Path) -> None:
    (repo / "m" / "routing.yaml").write_text(textwrap.dedent("""\
        default: stable
        labels: {stable: 1}
        shadow: {version: 3}
    """))
    dataplane = _dataplane(repo)
    registry = CollectorRegistry()
    ServerMetrics(registry, dataplane.registry, routing=dataplane.router, process=False, gpu=False)
    try:
        for _ in range(5):
            _y(dataplane)
        gates = {"min_samples": 1, "max_abs_diff": 10.0, "p99_slack_ms": 1000}  # measured, decided, never failing
        dataplane.start_rollout("m", {"candidate": "2", "min_dwell_s": 3600, "agreement_sample": 1.0, "gates": gates})
        for _ in range(200):
            _y(dataplane)
        _drain(dataplane)
        text = render(registry)[0].decode()
    finally:
        dataplane.close()
    samples = {s.name: s for f in text_string_to_metric_families(text) for s in f.samples}
    missing = [m for m in ROUTING_METRICS if not any(n == m or n.startswith(m + "_") for n in samples)]
    assert not missing, missing
    share = [s for f in text_string_to_metric_families(text) if f.name == "servelab_routing_traffic_share"
             for s in f.samples]
    assert {s.labels["variant"]: round(s.value, 6) for s in share} == {"stable": 0.95, "canary": 0.05}


def test_a_split_between_models_and_a_policy_shadow_with_its_comparison(repo: Path) -> None:
    scale_model(repo, "other", {1: 5.0})
    (repo / "m" / "routing.yaml").write_text(textwrap.dedent("""\
        default: "1"
        sticky: {parameter: user}
        split: [{version: 1, weight: 1}, {model: other, weight: 1, name: other-model}]
        shadow: {version: 3, sample: 1.0}
    """))
    dataplane = _dataplane(repo)
    try:
        answers = {_y(dataplane) for _ in range(200)}
        assert answers == {1.0, 5.0}  # half of the unversioned requests go to the other model
        _drain(dataplane)
        status = dataplane.rollout_status("m")
        assert status["split"][1] == {"variant": "other-model", "model": "other", "version": None, "weight": 1.0}
        shadow = status["shadow"]  # copies of m's own requests (not other's) to version 3, compared
        on_m = sum(v["requests"] for v in status["variants"] if v["model"] == "m")
        assert shadow["compared"] + shadow["shed"] + shadow["failed"] == on_m and shadow["compared"] > 0
        assert shadow["abs_diff"]["max"] == pytest.approx(2.0) and shadow["abs_diff"]["p50"] == pytest.approx(2.0)
        assert set(shadow["latency_ms"]) == {"primary", "v3"} and shadow["latency_ms"]["v3"]["p99"] > 0
    finally:
        dataplane.close()
