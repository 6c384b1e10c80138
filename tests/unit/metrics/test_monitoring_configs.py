"""deploy/monitoring: the Prometheus scrape config and the Grafana dashboard parse, have the basic
shape their tools expect, and reference only metric names a real servelab registry exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from harness.models import XY, unary_onnx
from harness.repository import io_config, write_config
from servelab.engine import Engine
from servelab.metrics import ServerMetrics, render
from servelab.metrics.gpu import NVML_METRICS
from servelab.metrics.routing import ROUTING_METRICS

MONITORING = Path(__file__).resolve().parents[3] / "deploy" / "monitoring"
METRIC = re.compile(r"\b((?:nv|servelab|process)_[a-zA-Z0-9_]+)")


def _exported(tmp_path: Path) -> set[str]:
    unary_onnx(tmp_path / "neg" / "1" / "model.onnx", "Neg", dims=("batch", 2), io=XY)
    config = io_config("neg", 'backend: "onnxruntime"', "FP32", [2], io=XY, max_batch_size=4, extra="dynamic_batching { }\n")
    write_config(tmp_path / "neg", config)
    registry = CollectorRegistry()
    with Engine(tmp_path) as engine:
        ServerMetrics(registry, engine.dataplane.registry)
        engine.infer("neg", {"x": np.ones((1, 2), np.float32)})
        text = render(registry)[0].decode()
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(s.name for s in family.samples)
    return names


def test_prometheus_config_scrapes_servelab_metrics_port() -> None:
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    job = jobs["servelab"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    assert any(t.endswith(":8002") for t in targets)


def test_dashboard_schema_basics() -> None:
    dash = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) >= 8
    for p in dash["panels"]:
        assert p["type"] == "timeseries" and p["targets"]
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]) and p["gridPos"]["w"] <= 24
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    assert exprs.count("histogram_quantile(0.99") >= 3  # request, queue, compute P99
    assert "nv_inference_exec_count" in exprs and "servelab_model_max_batch_size" in exprs  # batch efficiency
    assert "nv_inference_pending_request_count" in exprs  # queue depth


def test_dashboard_uses_only_exported_metric_names(tmp_path: Path) -> None:
    # GPU families appear only on GPU hosts, routing families once a model is routed (they are checked
    # against a real scrape in tests/unit/core/test_routing_dataplane.py and tests/integration/test_routing_prometheus.py)
    routing = {f"{m}{suffix}" for m in ROUTING_METRICS for suffix in ("", "_bucket", "_sum", "_count")}
    exported = _exported(tmp_path) | set(NVML_METRICS) | routing
    dash = (MONITORING / "grafana-dashboard.json").read_text()
    used = set(METRIC.findall(dash))
    assert used, "the dashboard queries no servelab metric"
    unknown = sorted(used - exported)
    assert not unknown, f"dashboard queries metrics the server does not export: {unknown}"
