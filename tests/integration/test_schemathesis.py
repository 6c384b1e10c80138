"""Schemathesis against the running server: >= 1,000 generated requests from the OIP REST spec.

The spec's paths are written ``/v2/models/${MODEL_NAME}/...``; the literal ``$`` is dropped so that
generated names can hit real models. Three request sources are mixed: schema-valid requests whose
model name and version come from the test repository (so infer bodies reach the decoder and the
models), schema-invalid ("negative") requests to the same, and schema-valid requests with free-form
model names. Every answer must be below 500, none may hang, and the server must be ready afterwards.
"""

from __future__ import annotations

import copy
import time
from importlib import resources
from typing import Any

import httpx
import requests
import schemathesis
import yaml
from conftest import ServerProcess
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.generation.modes import GenerationMode

MODELS = ["simple", "classify", "echo_fp32", "echo_int8", "echo_bool", "echo_bf16", "echo_bytes", "mlp_onnx", "nope"]
VERSIONS = ["1", "2", "latest"]
MIN_REQUESTS = 1000
EXAMPLES = 1100


def _spec() -> dict[str, Any]:
    text = resources.files("servelab.protocol").joinpath("specs/open_inference_rest.yaml").read_text()
    raw = yaml.safe_load(text)
    raw["paths"] = {path.replace("${", "{"): item for path, item in raw["paths"].items()}
    return raw


def _with_enums(raw: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(raw)
    for item in spec["paths"].values():
        for param in item.get("parameters", []):
            if param["name"] == "MODEL_NAME":
                param["schema"] = {"type": "string", "enum": MODELS}
            elif param["name"] == "MODEL_VERSION":
                param["schema"] = {"type": "string", "enum": VERSIONS}
    return spec


RAW = _spec()
KNOWN = schemathesis.openapi.from_dict(_with_enums(RAW))
FREE = schemathesis.openapi.from_dict(RAW)
CASES = st.one_of(
    KNOWN.as_strategy(GenerationMode.POSITIVE),
    KNOWN.as_strategy(GenerationMode.NEGATIVE),
    FREE.as_strategy(GenerationMode.POSITIVE),
)


def test_generated_requests_never_5xx(server: ServerProcess) -> None:
    sent: list[int] = []
    session = requests.Session()
    started = time.monotonic()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(case=CASES)
    def check(case: Any) -> None:
        response = case.call(base_url=server.http_url, session=session, timeout=10)
        sent.append(response.status_code)
        assert response.status_code < 500, (
            f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}\n"
            f"body: {str(getattr(case, 'body', None))[:300]}"
        )

    check()
    elapsed = time.monotonic() - started
    assert len(sent) >= MIN_REQUESTS, f"only {len(sent)} requests were generated"
    assert elapsed < 120, f"{len(sent)} requests took {elapsed:.0f} s"
    assert {s for s in sent if s == 200}, "no generated request succeeded"
    assert httpx.get(f"{server.http_url}/v2/health/ready", timeout=5).status_code == 200
