"""``servelab deploy k8s``: Kubernetes objects that run ``servelab serve`` on a cluster.

Objects (plain dicts, written as YAML by :mod:`servelab.deploy.write`): Namespace; the key Secret
(``SERVELAB_AUTH__MANAGEMENT_KEY`` / ``__INFERENCE_KEY`` of the pods come from it: a pod listens on
0.0.0.0, which servelab refuses without a management key); Deployment with readiness on
``/v2/health/ready`` and liveness on ``/v2/health/live``; Service; HorizontalPodAutoscaler on the
per-pod ``nv_inference_pending_request_count`` (requests waiting in the batchers, served through a
Prometheus adapter as a Pods metric); ServiceMonitor for prometheus-operator; NetworkPolicy that opens
inference (HTTP, gRPC) and metrics, and nothing else (the TorchServe management port is not exposed).

The model repository is baked into the image (see :mod:`servelab.deploy.dockerfile`) at ``/models``.
"""

from __future__ import annotations

from typing import Any

from servelab.config.settings import KubernetesSettings

__all__ = ["PORTS", "deployment_objects", "key_env", "labels", "quantity", "serve_args"]

Obj = dict[str, Any]

#: container ports of `servelab serve` in a pod (named: the Service and probes refer to names)
PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
_MANAGEMENT_PORT = 8081  # bound inside the pod, never exposed by the Service or the NetworkPolicy
MODELS_DIR = "/models"
SECRET_KEYS = {"management-key": "SERVELAB_AUTH__MANAGEMENT_KEY", "inference-key": "SERVELAB_AUTH__INFERENCE_KEY"}


def labels(k: KubernetesSettings) -> dict[str, str]:
    return {"app.kubernetes.io/name": "servelab", "app.kubernetes.io/instance": k.name}


def quantity(value: float) -> str:
    """A Kubernetes quantity: ``8`` or ``8500m``."""
    return str(int(value)) if float(value).is_integer() else f"{round(value * 1000)}m"


def _meta(k: KubernetesSettings, name: str | None = None) -> Obj:
    return {"name": name or k.name, "namespace": k.namespace, "labels": labels(k)}


def serve_args(models_dir: str, http: int, grpc: int, metrics: int, management: int) -> list[str]:
    """``servelab serve`` for a container: every interface, explicit ports (the entrypoint is ``servelab``)."""
    return [
        "serve", models_dir, "--host", "0.0.0.0",
        "--http-port", str(http), "--grpc-port", str(grpc),
        "--metrics-port", str(metrics), "--management-port", str(management),
    ]  # fmt: skip


def key_env(secret_name: str) -> list[Obj]:
    """The keys as SERVELAB_AUTH__* variables read from the key Secret."""
    return [
        {"name": env, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": key}}}
        for key, env in SECRET_KEYS.items()
    ]


def _secret(k: KubernetesSettings, keys: dict[str, str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(k, f"{k.name}-keys"),
        "type": "Opaque",
        "stringData": {key: keys[key] for key in SECRET_KEYS},
    }


def _probe(path: str, period_s: int, failures: int) -> Obj:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period_s, "failureThreshold": failures}


def container(k: KubernetesSettings) -> Obj:
    resources = {"cpu": k.cpu, "memory": k.memory}
    return {
        "name": "servelab",
        "image": k.image,
        "args": serve_args(MODELS_DIR, PORTS["http"], PORTS["grpc"], PORTS["metrics"], _MANAGEMENT_PORT),
        "ports": [{"name": name, "containerPort": port, "protocol": "TCP"} for name, port in PORTS.items()],
        "env": [*key_env(f"{k.name}-keys"), {"name": "OMP_NUM_THREADS", "value": "1"}],
        "readinessProbe": _probe("/v2/health/ready", 5, 3),
        "livenessProbe": _probe("/v2/health/live", 10, 3),
        "startupProbe": _probe("/v2/health/live", 2, 60),  # model loading may take minutes
        "resources": {"requests": resources, "limits": resources},
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, {"name": "shm", "mountPath": "/dev/shm"}],
    }


def _deployment(k: KubernetesSettings) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(k),
        "spec": {
            "replicas": k.min_replicas,
            "selector": {"matchLabels": labels(k)},
            "template": {
                "metadata": {"labels": labels(k)},
                "spec": {
                    # SIGTERM: servelab finishes in-flight requests (--exit-timeout-secs 30) before exiting
                    "terminationGracePeriodSeconds": 40,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
                    "containers": [container(k)],
                    "volumes": [
                        {"name": "tmp", "emptyDir": {}},
                        {"name": "shm", "emptyDir": {"medium": "Memory"}},  # python-backend workers' tensors
                    ],
                },
            },
        },
    }


def _service(k: KubernetesSettings) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(k),
        "spec": {
            "selector": labels(k),
            "ports": [
                {"name": name, "port": port, "targetPort": name, "protocol": "TCP"} for name, port in PORTS.items()
            ],
        },
    }


def _autoscaler(k: KubernetesSettings) -> Obj:
    metric = {
        "type": "Pods",
        "pods": {
            "metric": {"name": "nv_inference_pending_request_count"},
            "target": {"type": "AverageValue", "averageValue": quantity(k.target_pending_requests)},
        },
    }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(k),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": k.name},
            "minReplicas": k.min_replicas,
            "maxReplicas": k.max_replicas,
            "metrics": [metric],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
        },
    }


def _service_monitor(k: KubernetesSettings) -> Obj:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _meta(k),
        "spec": {
            "selector": {"matchLabels": labels(k)},
            "namespaceSelector": {"matchNames": [k.namespace]},
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s", "scheme": "http"}],
        },
    }


def _network_policy(k: KubernetesSettings) -> Obj:
    def port(name: str) -> Obj:
        return {"protocol": "TCP", "port": PORTS[name]}

    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(k),
        "spec": {
            "podSelector": {"matchLabels": labels(k)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"ports": [port("http"), port("grpc")]},  # inference: from anywhere the cluster routes
                {  # metrics: from the monitoring namespace only
                    "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
                    "ports": [port("metrics")],
                },
            ],
        },
    }


def deployment_objects(k: KubernetesSettings, keys: dict[str, str]) -> dict[str, list[Obj]]:
    """File name -> objects, in the order ``kubectl apply -f DIR`` should create them."""
    return {
        "00-namespace.yaml": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": k.namespace}}],
        "01-secret.yaml": [_secret(k, keys)],
        "10-deployment.yaml": [_deployment(k)],
        "11-service.yaml": [_service(k)],
        "12-hpa.yaml": [_autoscaler(k)],
        "13-networkpolicy.yaml": [_network_policy(k)],
        "20-servicemonitor.yaml": [_service_monitor(k)],
    }
