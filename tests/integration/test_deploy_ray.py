"""`servelab deploy ray` on a local Ray instance (127.0.0.1), driven with tritonclient over HTTP.

One Ray for the module: the example repository (examples/build_repository.py, without the graph models)
plus ``routed`` (two versions with the same answers, split 80/20 by its routing.yaml, sticky by a header)
is deployed once, every model's answers are compared with a `servelab serve` of the same folder, then
``simple`` and ``routed`` are scaled to two replicas and both are shown to serve (``routed``: with the split
and its stickiness holding across them). Ray is shut down at the end.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from harness.repository import scale_model
from harness.servers import HOST, ServerProcess, server_fixture

ray = pytest.importorskip("ray", reason="the ray extra (servelab[ray]) is part of the dev extra")

import tritonclient.http as httpclient  # noqa: E402
from pydantic import SecretStr  # noqa: E402
from ray import serve  # noqa: E402

from servelab.bench.net import free_port  # noqa: E402
from servelab.config.settings import ServerSettings  # noqa: E402
from servelab.deploy import ray_deploy  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "build_repository.py"
_DTYPES = {"INT32": np.int32, "FP32": np.float32, "UINT8": np.uint8, "INT64": np.int64}


def _build_examples(out: Path) -> Path:
    spec = importlib.util.spec_from_file_location("servelab_examples_build_repository", EXAMPLES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build(out, with_graph=False)


@pytest.fixture(scope="module")
def example_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = _build_examples(tmp_path_factory.mktemp("examples") / "repository")
    scale_model(root, "routed", {1: 2.0, 2: 2.0}, "version_policy: { all: {} }\n")
    (root / "routed" / "routing.yaml").write_text(
        "sticky: {header: x-user-id}\nsplit:\n  - {version: 1, weight: 80}\n  - {version: 2, weight: 20}\n")
    return root


reference = server_fixture("example_repository", "reference",
                           doc="`servelab serve` of the same repository: the answers Ray must give.")


@pytest.fixture(scope="module")
def settings(example_repository: Path) -> ServerSettings:
    port = free_port()  # Ray Serve binds the port itself: it takes no port 0
    return ServerSettings(model_repository=[example_repository], host=HOST, http_port=port)


@pytest.fixture(scope="module")
def deployed(settings: ServerSettings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ray_deploy.RayDeployment]:
    """A local Ray (logical CPUs, so that every replica fits on 2 cores), every example model deployed."""
    ray.init(
        address="local",
        num_cpus=16,
        include_dashboard=False,
        configure_logging=False,
        log_to_driver=False,
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
    )
    try:
        yield ray_deploy.deploy(settings)
    finally:
        ray_deploy.shutdown()
        ray.shutdown()
    assert not ray.is_initialized()


def _inputs(metadata: dict[str, Any], rows: int, seed: int) -> list[httpclient.InferInput]:
    rng = np.random.default_rng(seed)
    out = []
    for spec in metadata["inputs"]:
        shape = [rows if d == -1 else d for d in spec["shape"]]
        dtype = _DTYPES[spec["datatype"]]
        data = rng.integers(0, 100, size=shape).astype(dtype)
        tensor = httpclient.InferInput(spec["name"], shape, spec["datatype"])
        tensor.set_data_from_numpy(data, binary_data=True)
        out.append(tensor)
    return out


def _answer(client: httpclient.InferenceServerClient, model: str, seed: int) -> dict[str, np.ndarray]:
    metadata = client.get_model_metadata(model)
    result = client.infer(model, _inputs(metadata, rows=3, seed=seed))
    return {o["name"]: result.as_numpy(o["name"]) for o in metadata["outputs"]}


def test_every_model_answers_as_servelab_serve(deployed: ray_deploy.RayDeployment, reference: ServerProcess) -> None:
    ray_client = httpclient.InferenceServerClient(deployed.http_url.removeprefix("http://"))
    ref_client = httpclient.InferenceServerClient(reference.http_address)
    assert ray_client.is_server_live() and ray_client.is_server_ready()
    expected_models = sorted({row["name"] for row in ref_client.get_model_repository_index()})  # a row per version
    assert sorted(deployed.models) == expected_models
    for model in deployed.models:
        assert ray_client.is_model_ready(model)
        assert ray_client.get_model_metadata(model) == ref_client.get_model_metadata(model)
        assert ray_client.get_model_config(model) == ref_client.get_model_config(model)
        for seed in (0, 1):
            got, want = _answer(ray_client, model, seed), _answer(ref_client, model, seed)
            assert got.keys() == want.keys()
            for name in want:
                assert got[name].dtype == want[name].dtype and np.array_equal(got[name], want[name]), (model, name)


def test_front_application_answers_the_server_routes(deployed: ray_deploy.RayDeployment, reference: ServerProcess) -> None:
    with httpx.Client(base_url=deployed.http_url, timeout=30) as client:
        index = client.post("/v2/repository/index").json()
        assert sorted({r["name"] for r in index}) == sorted(deployed.models)  # one row per version
        assert all(r["state"] == "READY" for r in index)
        assert client.get("/v2").json()["name"] == "servelab"
        refused = client.post("/v2/repository/models/simple/unload")
        assert refused.status_code in (400, 501) and "servelab deploy ray" in refused.json()["error"]
        missing = client.post("/v2/models/nosuch/infer", json={"inputs": []})
        assert missing.status_code == 404 and "not deployed" in missing.json()["error"]
        bad = client.post("/v2/models/simple/infer", json={"inputs": [{"name": "INPUT0", "shape": [1, 3], "datatype": "INT32", "data": [1, 2, 3]}]})
        assert bad.status_code == 400 and "INPUT" in bad.json()["error"]  # servelab's own validation, in the replica


def _replica_counts(model: str) -> dict[str, int]:
    """Successful requests per replica of ``model``, asking through its handle until every replica has
    answered at least once (Ray picks the replica per call; bounded)."""
    handle = serve.get_app_handle(model)
    running = _running_replicas(model)
    seen: dict[str, int] = {}
    for _ in range(400):
        answer = handle.replica_statistics.remote().result(timeout_s=60)
        stats = answer["statistics"]["model_stats"]
        seen[answer["replica"]] = sum(s["inference_stats"]["success"]["count"] for s in stats)
        if len(seen) == running:
            break
    return seen


def _running_replicas(model: str) -> int:
    app = serve.status().applications[model]
    return app.deployments[model].replica_states.get("RUNNING", 0)


def test_scaling_a_model_to_two_replicas(
    deployed: ray_deploy.RayDeployment, settings: ServerSettings
) -> None:
    ray_deploy.scale(settings, "simple", 2)
    assert _running_replicas("simple") == 2
    client = httpclient.InferenceServerClient(deployed.http_url.removeprefix("http://"), concurrency=8)
    metadata = client.get_model_metadata("simple")
    x = np.arange(16, dtype=np.int32).reshape(1, 16)
    sent = 0
    deadline = time.monotonic() + 120
    counts: dict[str, int] = {}
    # Ray's router learns of the new replica asynchronously: send rounds until both replicas served some
    while time.monotonic() < deadline:
        pending = [client.async_infer("simple", _inputs(metadata, 1, seed)) for seed in range(64)]  # 8 at once
        results = [p.get_result() for p in pending]
        sent += len(results)
        assert all(r.get_response()["model_name"] == "simple" for r in results)
        counts = _replica_counts("simple")
        if len(counts) == 2 and all(v > 0 for v in counts.values()):
            break
    assert len(counts) == 2 and all(v > 0 for v in counts.values()), counts
    assert sum(counts.values()) >= sent  # every request was answered by one of the two (plus earlier ones)
    ones = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in ones:
        tensor.set_data_from_numpy(x)
    assert np.array_equal(client.infer("simple", ones).as_numpy("OUTPUT0"), 2 * x)


def test_keys_hold_at_every_replica_s_door(deployed: ray_deploy.RayDeployment, settings: ServerSettings) -> None:
    """Redeployed with an inference key: the same door as `servelab serve`, in the replicas and in front."""
    auth = settings.auth.model_copy(update={"inference_key": SecretStr("k-" + "x" * 30)})
    keyed = settings.model_copy(update={"auth": auth})
    ray_deploy.deploy(keyed, models=["simple"])
    body = {"inputs": [{"name": n, "shape": [1, 16], "datatype": "INT32", "data": list(range(16))} for n in ("INPUT0", "INPUT1")]}
    with httpx.Client(base_url=deployed.http_url, timeout=30) as client:
        assert client.get("/v2/health/ready").status_code == 200  # health stays open
        denied = client.post("/v2/models/simple/infer", json=body)
        assert denied.status_code == 401 and denied.headers["www-authenticate"].startswith("Bearer")
        assert client.get("/v2").status_code == 401  # the front application's door too
        allowed = client.post("/v2/models/simple/infer", json=body, headers={"Authorization": "Bearer k-" + "x" * 30})
        assert allowed.status_code == 200 and allowed.json()["outputs"][0]["data"] == [2 * i for i in range(16)]


def test_a_rollout_split_is_honoured_across_replicas(
    deployed: ray_deploy.RayDeployment, settings: ServerSettings
) -> None:
    """``routed`` (versions 1 and 2, split 80/20 sticky by ``x-user-id`` in its routing.yaml) on two replicas:
    200 keys, each sent 5 times: every key's answers name one version, whichever replica answered, and the
    share of keys on version 2 is 20% within a binomial tolerance. Each replica reads the same policy from the
    repository and hashes the key the same way (blake2b), so nothing is shared between replicas."""
    ray_deploy.scale(settings, "routed", 2)
    assert _running_replicas("routed") == 2
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}]}
    keys = [f"user-{i}" for i in range(200)]
    seen: dict[str, set[str]] = {k: set() for k in keys}
    with httpx.Client(base_url=deployed.http_url, timeout=60) as client:
        for _ in range(5):
            for key in keys:
                r = client.post("/v2/models/routed/infer", json=body, headers={"x-user-id": key})
                assert r.status_code == 200, r.text
                seen[key].add(r.json()["model_version"])
    assert all(len(v) == 1 for v in seen.values()), {k: v for k, v in seen.items() if len(v) != 1}
    on_two = sum(v == {"2"} for v in seen.values())
    assert abs(on_two - 40) <= 5 * (200 * 0.2 * 0.8) ** 0.5, on_two  # 20% of 200 keys, 5 sigma
    counts = _replica_counts("routed")
    assert len(counts) == 2 and all(c > 0 for c in counts.values()), counts  # both replicas answered keys
