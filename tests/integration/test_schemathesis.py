"""Schemathesis against the running server, every REST front door, from each API's own OpenAPI spec.

- OIP (``servelab/protocol/specs/open_inference_rest.yaml``): >= 1,000 generated requests. The spec's
  paths are written ``/v2/models/${MODEL_NAME}/...``; the literal ``$`` is dropped so that generated
  names can hit real models.
- TF Serving (``specs/tfserving_rest.yaml``, written here: TF Serving ships none) and TorchServe
  inference (``specs/torchserve_inference_open_api.json``, TorchServe's own, with a JSON body added
  beside its ``*/*`` one so that bodies reach the JSON decoders): on the shared server's HTTP port.
- TorchServe management (``specs/torchserve_management_open_api.json``): on a private server in
  explicit mode, since register, scale and unregister change what is loaded.

Request sources are mixed: schema-valid requests whose model names come from the test repository (so
bodies reach the decoders and the models), schema-invalid ("negative") requests to the same, and
schema-valid requests with free-form names. Every answer must be below 500, none may hang, the runs are
bounded (examples and seconds), and the server must still answer ready afterwards.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.generation.modes import GenerationMode

from harness.servers import ServerProcess, stopping

SPECS = Path(__file__).parent / "specs"
MODELS = ["simple", "classify", "echo_fp32", "echo_int8", "echo_bool", "echo_bf16", "echo_bytes", "mlp_onnx", "nope"]
VERSIONS = ["1", "2", "latest"]
MIN_REQUESTS = 1000
EXAMPLES = 1100
#: the other specs have fewer routes; these counts keep the whole file within a few minutes on 2 cores
COMPAT_EXAMPLES = 400
MANAGEMENT_EXAMPLES = 250
#: management models: ONNX only, so that each scale (a reload) is quick
MANAGED = ["simple", "echo_fp32", "classify", "nope"]


def _oip_spec() -> dict[str, Any]:
    text = resources.files("servelab.protocol").joinpath("specs/open_inference_rest.yaml").read_text()
    raw = yaml.safe_load(text)
    raw["paths"] = {path.replace("${", "{"): item for path, item in raw["paths"].items()}
    return raw


def _with_enums(raw: dict[str, Any], enums: dict[str, list[str]]) -> dict[str, Any]:
    """A copy whose path and query parameters named in ``enums`` take only those values."""
    spec = copy.deepcopy(raw)
    for item in spec["paths"].values():
        for operation in [item, *[v for v in item.values() if isinstance(v, dict)]]:
            for param in operation.get("parameters", []):
                if "$ref" not in param and param["name"] in enums:
                    param["schema"] = {"type": "string", "enum": enums[param["name"]]}
    for param in spec.get("components", {}).get("parameters", {}).values():
        if param["name"] in enums:
            param["schema"] = {"type": "string", "enum": enums[param["name"]]}
    return spec


def _mixed(raw: dict[str, Any], enums: dict[str, list[str]], negative: bool = True) -> st.SearchStrategy[Any]:
    known = schemathesis.openapi.from_dict(_with_enums(raw, enums))
    free = schemathesis.openapi.from_dict(raw)
    sources = [known.as_strategy(GenerationMode.POSITIVE), free.as_strategy(GenerationMode.POSITIVE)]
    if negative:
        sources.append(known.as_strategy(GenerationMode.NEGATIVE))
    return st.one_of(*sources)


def _torchserve_inference_spec() -> dict[str, Any]:
    raw = json.loads((SPECS / "torchserve_inference_open_api.json").read_text())
    for path in ("/predictions/{model_name}", "/predictions/{model_name}/{model_version}"):
        content = raw["paths"][path]["post"]["requestBody"]["content"]
        content["application/json"] = {"schema": {}}  # any JSON value, so that bodies reach the JSON decoders
    return raw


def _torchserve_management_spec() -> dict[str, Any]:
    """TorchServe's spec with worker counts bounded: servelab has no cap of its own on them yet."""
    raw = json.loads((SPECS / "torchserve_management_open_api.json").read_text())
    for item in raw["paths"].values():
        for operation in item.values():
            for param in operation.get("parameters", []) if isinstance(operation, dict) else []:
                if param["name"] in ("initial_workers", "min_worker", "max_worker", "number_gpu"):
                    param["schema"] = {"type": "integer", "minimum": 0, "maximum": 2}
    return raw


def _fuzz(base_url: str, cases: st.SearchStrategy[Any], examples: int, budget_s: float) -> list[int]:
    """Send ``examples`` generated requests; every answer below 500. Returns the statuses seen."""
    sent: list[int] = []
    session = requests.Session()
    started = time.monotonic()

    @settings(
        max_examples=examples,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        database=None,
        derandomize=True,
    )
    @given(case=cases)
    def check(case: Any) -> None:
        response = case.call(base_url=base_url, session=session, timeout=10)
        sent.append(response.status_code)
        assert response.status_code < 500, (
            f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}\n"
            f"query: {getattr(case, 'query', None)} body: {str(getattr(case, 'body', None))[:300]}"
        )

    check()
    elapsed = time.monotonic() - started
    assert elapsed < budget_s, f"{len(sent)} requests took {elapsed:.0f} s"
    assert 200 in sent, "no generated request succeeded"
    return sent


def _still_ready(server: ServerProcess) -> None:
    assert httpx.get(f"{server.http_url}/v2/health/ready", timeout=5).status_code == 200


def test_generated_oip_requests_never_5xx(server: ServerProcess) -> None:
    raw = _oip_spec()
    sent = _fuzz(server.http_url, _mixed(raw, {"MODEL_NAME": MODELS, "MODEL_VERSION": VERSIONS}), EXAMPLES, 120)
    assert len(sent) >= MIN_REQUESTS, f"only {len(sent)} requests were generated"
    _still_ready(server)


def test_generated_tfserving_requests_never_5xx(server: ServerProcess) -> None:
    raw = yaml.safe_load((SPECS / "tfserving_rest.yaml").read_text())
    _fuzz(server.http_url, _mixed(raw, {"model_name": MODELS, "version": VERSIONS}), COMPAT_EXAMPLES, 90)
    _still_ready(server)


def test_generated_torchserve_inference_requests_never_5xx(server: ServerProcess) -> None:
    enums = {"model_name": MODELS, "model_version": VERSIONS}
    _fuzz(server.http_url, _mixed(_torchserve_inference_spec(), enums), COMPAT_EXAMPLES, 90)
    _still_ready(server)


@pytest.fixture
def managed_server(server_factory: Any) -> Iterator[ServerProcess]:
    with stopping(server_factory("torchserve-management-fuzz", "--model-control-mode", "explicit",
                                 *[arg for name in MANAGED[:-1] for arg in ("--load-model", name)])) as server:
        yield server


def test_generated_torchserve_management_requests_never_5xx(managed_server: ServerProcess) -> None:
    enums = {"model_name": MANAGED, "url": MANAGED, "model_version": ["1", "all", "2"]}
    # positive cases only: a negative one may ask for a billion workers, and no cap exists yet
    cases = _mixed(_torchserve_management_spec(), enums, negative=False)
    _fuzz(managed_server.management_url, cases, MANAGEMENT_EXAMPLES, 150)
    assert httpx.get(f"{managed_server.http_url}/v2/health/live", timeout=5).status_code == 200
