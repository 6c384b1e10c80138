"""`servelab deploy k8s` output validates: Kubernetes objects against the Kubernetes 1.37 schemas
(kubernetes-validate, strict: unknown fields fail), KServe and prometheus-operator objects against their
CRDs' openAPIV3Schema (crds/, see SOURCE.md), with unknown fields refused as `kubectl --validate=strict`
would. No network, no cluster."""

from __future__ import annotations

import gzip
import json
import re
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is in the dev extra")
import jsonschema  # noqa: E402  (kubernetes-validate's dependency)

from servelab.config.settings import KubernetesSettings, ServerSettings  # noqa: E402
from servelab.deploy.dockerfile import dockerfile  # noqa: E402
from servelab.deploy.write import write_manifests  # noqa: E402
from servelab.frontends.auth import REST_ROUTES  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
CRDS = Path(__file__).parent / "crds"
K8S_VERSION = "1.37.0"
#: apiVersion/kind -> CRD schema file
CRD_SCHEMAS = {
    ("serving.kserve.io/v1beta1", "InferenceService"): "serving.kserve.io_v1beta1_inferenceservice.json.gz",
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): "serving.kserve.io_v1alpha1_servingruntime.json.gz",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "monitoring.coreos.com_v1_servicemonitor.json.gz",
}


def _crd_schema(name: str) -> dict[str, Any]:
    return json.loads(gzip.decompress((CRDS / name).read_bytes()))


def _unknown_fields(obj: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Fields the structural schema does not declare (Kubernetes would prune them silently)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(obj, dict) and "properties" in schema:
        found = []
        for key, value in obj.items():
            if key in schema["properties"]:
                found += _unknown_fields(value, schema["properties"][key], f"{path}.{key}")
            elif not schema.get("additionalProperties"):
                found.append(f"{path}.{key}")
        return found
    if isinstance(obj, dict) and isinstance(schema.get("additionalProperties"), dict):
        return [f for k, v in obj.items() for f in _unknown_fields(v, schema["additionalProperties"], f"{path}.{k}")]
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [f for i, v in enumerate(obj) for f in _unknown_fields(v, schema["items"], f"{path}[{i}]")]
    return []


def validate_custom(obj: dict[str, Any]) -> None:
    schema = _crd_schema(CRD_SCHEMAS[(obj["apiVersion"], obj["kind"])])
    jsonschema.Draft7Validator(schema).validate(obj)
    unknown = _unknown_fields({k: v for k, v in obj.items() if k != "metadata"}, schema)
    assert not unknown, f"{obj['kind']}: fields its CRD does not know: {unknown}"
    # metadata is `type: object` in a CRD: check it as the API server does, as ObjectMeta
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}, K8S_VERSION, strict=True)


def validate(obj: dict[str, Any]) -> None:
    if (obj["apiVersion"], obj["kind"]) in CRD_SCHEMAS:
        validate_custom(obj)
    else:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def _repository(root: Path) -> Path:
    """A repository whose backends need extras: ONNX (core), TorchScript (torch), OpenVINO."""
    for name, platform, filename in (
        ("simple", "onnxruntime_onnx", "model.onnx"),
        ("mlp_torchscript", "pytorch_libtorch", "model.pt"),
        ("mlp_openvino", "openvino", "model.xml"),
    ):
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / filename).write_bytes(b"")
        (root / name / "config.pbtxt").write_text(f'name: "{name}"\nplatform: "{platform}"\n')
    return root


@pytest.fixture
def written(tmp_path: Path) -> dict[str, Any]:
    repo = _repository(tmp_path / "context" / "models")
    settings = ServerSettings(model_repository=[repo])
    paths = write_manifests(settings, tmp_path / "out", tmp_path / "context")
    return {"paths": paths, "out": tmp_path / "out"}


def _objects(out: Path) -> list[dict[str, Any]]:
    return [obj for path in sorted(out.glob("*.yaml")) for obj in yaml.safe_load_all(path.read_text())]


def test_every_manifest_validates(written: dict[str, Any]) -> None:
    objects = _objects(written["out"])
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted([
        "Namespace", "Secret", "Deployment", "Service", "HorizontalPodAutoscaler", "NetworkPolicy",
        "ServiceMonitor", "ServingRuntime", "InferenceService",
    ])  # fmt: skip
    for obj in objects:
        validate(obj)


@pytest.mark.parametrize(
    ("kind", "path", "bad"),
    [
        ("HorizontalPodAutoscaler", ("spec", "minReplicas"), "one"),
        ("Deployment", ("spec", "template", "spec", "containers", 0, "readinessProbe", "httpGet", "pathh"), "/"),
        ("InferenceService", ("spec", "predictor", "model", "storageUri"), 7),
        ("ServingRuntime", ("spec", "containers", 0, "imagee"), "x"),
        ("ServiceMonitor", ("spec", "endpoints", 0, "scheme"), "gopher"),
    ],
)
def test_the_validation_refuses_a_broken_manifest(written: dict[str, Any], kind: str, path: tuple[Any, ...], bad: Any) -> None:
    (obj,) = [o for o in _objects(written["out"]) if o["kind"] == kind]
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = bad
    with pytest.raises((kubernetes_validate.ValidationError, jsonschema.ValidationError, AssertionError)):
        validate(obj)


def test_probes_and_metric_are_servelab_s(written: dict[str, Any]) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from servelab.metrics import ServerMetrics

    objects = {o["kind"]: o for o in _objects(written["out"])}
    container = objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        assert ("GET", container[probe]["httpGet"]["path"]) in REST_ROUTES
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    metric = objects["HorizontalPodAutoscaler"]["spec"]["metrics"][0]["pods"]["metric"]["name"]

    class _NoModels:
        def records(self) -> list[Any]:
            return []

    registry = CollectorRegistry()
    ServerMetrics(registry, _NoModels(), process=False, gpu=False)
    assert f"# TYPE {metric} gauge" in generate_latest(registry).decode()
    envs = {e["name"] for e in container["env"]}
    assert {"SERVELAB_AUTH__MANAGEMENT_KEY", "SERVELAB_AUTH__INFERENCE_KEY"} <= envs  # 0.0.0.0 needs the key
    opened = [p["port"] for rule in objects["NetworkPolicy"]["spec"]["ingress"] for p in rule["ports"]]
    assert 8081 not in opened and sorted(opened) == [8000, 8001, 8002]


def test_the_secret_is_private_and_holds_the_configured_keys(tmp_path: Path) -> None:
    repo = _repository(tmp_path / "models")
    key_file = tmp_path / "key_file.json"
    key_file.write_text(json.dumps({"management": {"key": "m-key-1"}, "inference": {"key": "i-key-1"}}))
    key_file.chmod(0o600)
    settings = ServerSettings(model_repository=[repo], auth={"key_file": key_file})
    write_manifests(settings, tmp_path / "out", tmp_path)
    secret_file = tmp_path / "out" / "01-secret.yaml"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    (secret,) = yaml.safe_load_all(secret_file.read_text())
    assert secret["stringData"] == {"management-key": "m-key-1", "inference-key": "i-key-1"}


def test_generated_keys_are_fresh_and_long(written: dict[str, Any]) -> None:
    (secret,) = yaml.safe_load_all((written["out"] / "01-secret.yaml").read_text())
    keys = secret["stringData"]
    assert keys["management-key"] != keys["inference-key"] and all(len(k) >= 40 for k in keys.values())


def test_the_dockerfile_installs_with_the_readme_s_commands(written: dict[str, Any]) -> None:
    text = (written["out"] / "Dockerfile").read_text()
    assert "COPY --chown=1000:1000 models /models" in text
    runs = [line.removeprefix("RUN ").strip() for line in text.splitlines() if line.startswith("RUN ")]
    installs = [r for r in runs if "pip install" in r or "servelab.protocol" in r]
    assert installs[0] == "python -m pip install --no-cache-dir '.[openvino,torch]'"  # extras of the backends
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## More than one machine"):]
    for command in installs:
        assert command in section, f"the Dockerfile runs {command!r}, which the README's walk-through does not show"
    # deploy/Dockerfile is the same image without a repository, written by the same function
    assert (ROOT / "deploy" / "Dockerfile").read_text() == dockerfile([], None)
    for command in re.findall(r"^RUN (.+)$", (ROOT / "deploy" / "Dockerfile").read_text(), re.M):
        if "pip install" in command or "servelab.protocol" in command:
            assert command in section


def test_settings_refuse_a_bad_namespace_and_inverted_replicas() -> None:
    with pytest.raises(ValueError, match="namespace"):
        KubernetesSettings(namespace="Not_A_Name")
    with pytest.raises(ValueError, match="max_replicas"):
        KubernetesSettings(min_replicas=3, max_replicas=2)


def test_the_command_writes_the_folder_and_refuses_a_repository_outside_the_context(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from servelab.cli import app

    repo = _repository(tmp_path / "ctx" / "models")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["deploy", "k8s", str(repo), "--out", str(out), "--context", str(tmp_path / "ctx"),
                                      "--image", "registry.test/servelab:9", "--namespace", "inference"])
    assert result.exit_code == 0, result.output
    deployment = yaml.safe_load((out / "10-deployment.yaml").read_text())
    assert deployment["metadata"]["namespace"] == "inference"
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.test/servelab:9"
    outside = CliRunner().invoke(app, ["deploy", "k8s", str(repo), "--out", str(out), "--context", str(tmp_path / "elsewhere")])
    assert outside.exit_code == 2 and "outside the build context" in outside.output
    bad = CliRunner().invoke(app, ["deploy", "k8s", str(repo), "--out", str(out), "--namespace", "Bad_Name"])
    assert bad.exit_code == 2 and "namespace" in bad.output
