"""A KServe ``ServingRuntime`` that runs ``servelab serve`` and an ``InferenceService`` that uses it.

KServe's storage initializer fetches ``storageUri`` (a Triton-layout repository) into ``/mnt/models``;
the runtime serves it over the Open Inference Protocol (``protocolVersion: v2``), so KServe clients and
its v2 routing work unchanged. KServe gives a container one port: 8080 (HTTP), its convention.
"""

from __future__ import annotations

from typing import Any

from servelab.config.settings import KubernetesSettings
from servelab.deploy.k8s import key_env, labels, serve_args

__all__ = ["RUNTIME_NAME", "kserve_objects"]

Obj = dict[str, Any]

RUNTIME_NAME = "servelab"
_HTTP, _GRPC, _METRICS, _MANAGEMENT = 8080, 9000, 8002, 8085
#: model formats servelab serves from a Triton repository (KServe matches them against modelFormat)
_FORMATS = ("triton", "onnx", "pytorch", "openvino")


def _runtime(k: KubernetesSettings) -> Obj:
    resources = {"cpu": k.cpu, "memory": k.memory}
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ServingRuntime",
        "metadata": {"name": RUNTIME_NAME, "namespace": k.namespace, "labels": labels(k)},
        "spec": {
            "supportedModelFormats": [{"name": f, "autoSelect": f == "triton"} for f in _FORMATS],
            "protocolVersions": ["v2", "grpc-v2"],
            "multiModel": False,
            "annotations": {"prometheus.kserve.io/port": str(_METRICS), "prometheus.kserve.io/path": "/metrics"},
            "containers": [
                {
                    "name": "kserve-container",
                    "image": k.image,
                    "args": serve_args("/mnt/models", _HTTP, _GRPC, _METRICS, _MANAGEMENT),
                    "ports": [{"containerPort": _HTTP, "protocol": "TCP"}],
                    "env": [*key_env(f"{k.name}-keys"), {"name": "OMP_NUM_THREADS", "value": "1"}],
                    "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": _HTTP}, "periodSeconds": 5},
                    "resources": {"requests": resources, "limits": resources},
                }
            ],
        },
    }


def _inference_service(k: KubernetesSettings) -> Obj:
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": k.name,
            "namespace": k.namespace,
            "labels": labels(k),
            "annotations": {"serving.kserve.io/enable-prometheus-scraping": "true"},
        },
        "spec": {
            "predictor": {
                "minReplicas": k.min_replicas,
                "maxReplicas": k.max_replicas,
                "model": {
                    "modelFormat": {"name": "triton"},
                    "runtime": RUNTIME_NAME,
                    "protocolVersion": "v2",
                    "storageUri": k.storage_uri,
                },
            }
        },
    }


def kserve_objects(k: KubernetesSettings) -> dict[str, list[Obj]]:
    """File name -> objects (the key Secret comes from :func:`servelab.deploy.k8s.deployment_objects`)."""
    return {"30-kserve-servingruntime.yaml": [_runtime(k)], "31-kserve-inferenceservice.yaml": [_inference_service(k)]}
