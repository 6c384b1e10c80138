"""TorchServe's Prometheus metric names (its ``metrics_mode=prometheus`` frontend metrics), so that a scrape
config and dashboards written for TorchServe's metrics port keep working.

``ts_inference_requests_total``, ``ts_inference_latency_microseconds`` and ``ts_queue_latency_microseconds``
with TorchServe's labels ``model_name``, ``model_version`` and ``hostname``, read at scrape time from the
same statistics as Triton's ``nv_*`` families. ``model_version`` is servelab's version number (TorchServe
writes ``default`` for requests that name none). TorchServe's ``Requests2XX``/``4XX``/``5XX`` count HTTP
statuses, which servelab does not keep per status; they are not exported.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from servelab.metrics.collector import ModelRegistryLike

__all__ = ["TorchServeCollector"]

_LABELS = ["model_name", "model_version", "hostname"]


class TorchServeCollector(Collector):
    """TorchServe's frontend metrics of every loaded model version."""

    def __init__(self, model_registry: ModelRegistryLike, hostname: str | None = None) -> None:
        self.model_registry = model_registry
        self.hostname = hostname or socket.gethostname()

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("ts_inference_requests", "Total number of inference requests.", labels=_LABELS)
        latency = Metric("ts_inference_latency_microseconds", "Cumulative inference duration in microseconds", "counter")
        queue = Metric("ts_queue_latency_microseconds", "Cumulative queue duration in microseconds", "counter")
        for record in self.model_registry.records():
            for version, lv in sorted(record.versions.items()):
                stats = lv.stats.as_dict()["inference_stats"]
                labels = {"model_name": lv.name, "model_version": str(version), "hostname": self.hostname}
                requests.add_metric(list(labels.values()), float(stats["success"]["count"] + stats["fail"]["count"]))
                latency.add_sample(latency.name, labels, stats["success"]["ns"] / 1000.0)
                queue.add_sample(queue.name, labels, stats["queue"]["ns"] / 1000.0)
        yield requests
        yield latency
        yield queue
