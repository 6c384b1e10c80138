"""Prometheus metrics: collectors registered on a registry passed in, never the global one."""

from servelab.metrics.collector import ModelCollector, ServerMetrics, render
from servelab.metrics.custom import CustomMetrics
from servelab.metrics.gpu import NvmlCollector
from servelab.metrics.histograms import BATCH_BUCKETS, LATENCY_BUCKETS_S, Histogram, ModelHistograms
from servelab.metrics.routing import ROUTING_METRICS, RoutingCollector

__all__ = [
    "BATCH_BUCKETS",
    "LATENCY_BUCKETS_S",
    "ROUTING_METRICS",
    "CustomMetrics",
    "Histogram",
    "ModelCollector",
    "ModelHistograms",
    "NvmlCollector",
    "RoutingCollector",
    "ServerMetrics",
    "render",
]
