"""Prometheus metrics of the server: Triton's ``nv_*`` families plus latency and batch histograms.

Counters are read from each loaded version's statistics at scrape time, so ``/metrics`` always agrees
with the statistics extension. Triton's cumulative counters keep Triton's exact names (no ``_total``
suffix, so dashboards written for Triton work unchanged); prometheus-client only writes such names
as ``untyped`` families, which PromQL's ``rate()`` treats like counters. Histograms come from the
schedulers' :class:`~servelab.metrics.histograms.ModelHistograms`.

This layer imports nothing from ``servelab.core``: the model registry is read through the small
protocols below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from servelab.metrics.custom import CustomMetrics
from servelab.metrics.gpu import NvmlCollector
from servelab.metrics.histograms import Histogram, ModelHistograms
from servelab.metrics.routing import RouterLike, RoutingCollector

__all__ = ["ModelCollector", "ServerMetrics", "render"]

_LABELS = ("model", "version")

#: Triton name -> (help, how to read it from ModelStats.as_dict())
_COUNTERS: dict[str, tuple[str, str]] = {
    "nv_inference_request_success": ("Number of successful inference requests, all batch sizes", "success.count"),
    "nv_inference_request_failure": ("Number of failed inference requests, all batch sizes", "fail.count"),
    "nv_inference_count": ("Number of inferences performed (a batch of n counts n)", "inference_count"),
    "nv_inference_exec_count": ("Number of model executions performed", "execution_count"),
    "nv_inference_request_duration_us": ("Cumulative inference request duration in microseconds", "success.us"),
    "nv_inference_queue_duration_us": ("Cumulative inference queuing duration in microseconds", "queue.us"),
    "nv_inference_compute_input_duration_us": (
        "Cumulative compute input duration in microseconds", "compute_input.us"),
    "nv_inference_compute_infer_duration_us": (
        "Cumulative compute inference duration in microseconds", "compute_infer.us"),
    "nv_inference_compute_output_duration_us": (
        "Cumulative inference compute output duration in microseconds", "compute_output.us"),
    "nv_cache_num_hits_per_model": ("Number of response cache hits per model", "cache_hit.count"),
    "nv_cache_num_misses_per_model": ("Number of response cache misses per model", "cache_miss.count"),
    "nv_cache_hit_duration_per_model": ("Cumulative cache hit lookup duration in microseconds", "cache_hit.us"),
    "nv_cache_miss_duration_per_model": (
        "Cumulative cache miss lookup and insertion duration in microseconds", "cache_miss.us"),
}

#: servelab histogram name -> (help, ModelHistograms attribute)
_HISTOGRAMS: dict[str, tuple[str, str]] = {
    "servelab_request_duration_seconds": ("Time in the scheduler per request: queue, compute, answer", "request"),
    "servelab_queue_duration_seconds": ("Time a request waited in the batcher queue", "queue"),
    "servelab_compute_duration_seconds": ("Duration of one backend execution (one batch)", "compute"),
    "servelab_batch_size": ("Inferences (rows) per backend execution", "batch_size"),
}


class _Version(Protocol):
    name: str
    version: int
    stats: Any
    scheduler: Any
    config: Any
    instances: Any


_STAGE_NAME = "servelab_model_stage_duration_us"


def _stage_us(instances: Iterable[Any]) -> dict[str, float]:
    """Cumulative microseconds per pipeline stage, summed over a version's instances: every ``*_ns``
    counter of ``Backend.stage_stats()`` (e.g. the GraphSAGE sampler's sample / gather, the fused
    model's layers) and each ensemble step as ``step<i>_<model>``."""
    totals: dict[str, float] = {}
    for backend in instances:
        stages = backend.stage_stats() if hasattr(backend, "stage_stats") else {}
        for key, value in stages.items():
            if key.endswith("_ns") and isinstance(value, int):
                totals[key[:-3]] = totals.get(key[:-3], 0.0) + value / 1000.0
        for step in stages.get("steps", ()):
            label = f"step{step['step']}_{step['model_name']}"
            totals[label] = totals.get(label, 0.0) + step["total_ns"] / 1000.0
    return totals


class _Record(Protocol):
    @property
    def versions(self) -> Mapping[int, _Version]: ...


class ModelRegistryLike(Protocol):
    def records(self) -> Iterable[_Record]: ...


def _read(stats: Mapping[str, Any], path: str) -> float:
    infer_stats = stats["inference_stats"]
    if "." not in path:
        return float(stats[path])
    key, unit = path.split(".")
    if unit == "count":
        return float(infer_stats[key]["count"])
    return infer_stats[key]["ns"] / 1000.0


class ModelCollector(Collector):
    """Reads every loaded version's statistics and histograms at scrape time.

    ``statistics`` (the data plane's, summed over a server's processes when it has several) replaces
    each version's own counters where it has a row for that version; histograms stay this process's.
    """

    def __init__(self, model_registry: ModelRegistryLike,
                 statistics: Callable[[], Mapping[str, Any]] | None = None) -> None:
        self.model_registry = model_registry
        self.statistics = statistics

    def _versions(self) -> list[_Version]:
        return [lv for record in self.model_registry.records() for _, lv in sorted(record.versions.items())]

    def collect(self) -> Iterator[Metric]:
        versions = self._versions()
        counters = {name: Metric(name, doc, "unknown") for name, (doc, _) in _COUNTERS.items()}
        pending = GaugeMetricFamily(
            "nv_inference_pending_request_count", "Instantaneous number of requests waiting in the queue",
            labels=list(_LABELS))
        max_batch = GaugeMetricFamily(
            "servelab_model_max_batch_size", "max_batch_size of the model's config (0: does not batch)",
            labels=list(_LABELS))
        hists = {name: HistogramMetricFamily(name, doc, labels=list(_LABELS)) for name, (doc, _) in _HISTOGRAMS.items()}
        stages = Metric(_STAGE_NAME, "Cumulative time per pipeline stage in microseconds (sampling, gather, "
                        "layers; ensemble steps)", "unknown")  # fmt: skip
        rows = ({(r["name"], r["version"]): r for r in self.statistics()["model_stats"]}
                if self.statistics is not None and versions else {})  # fmt: skip
        for lv in versions:
            labels = {"model": lv.name, "version": str(lv.version)}
            snapshot = rows.get((lv.name, str(lv.version))) or lv.stats.as_dict()
            for name, (_, path) in _COUNTERS.items():
                counters[name].add_sample(name, labels, _read(snapshot, path))
            pending.add_metric([lv.name, str(lv.version)], float(getattr(lv.scheduler, "pending", 0)))
            max_batch.add_metric([lv.name, str(lv.version)], float(lv.config.max_batch_size))
            for stage, us in sorted(_stage_us(getattr(lv, "instances", ())).items()):
                stages.add_sample(_STAGE_NAME, {**labels, "stage": stage}, us)
            observed: ModelHistograms | None = getattr(lv.scheduler, "histograms", None)
            if observed is None:
                continue
            for name, (_, attr) in _HISTOGRAMS.items():
                hist: Histogram = getattr(observed, attr)
                buckets, total, _count = hist.snapshot()
                hists[name].add_metric([lv.name, str(lv.version)], buckets, total)
        yield from counters.values()
        yield pending
        yield max_batch
        yield stages
        yield from hists.values()


class ServerMetrics:
    """Every collector of one server, registered on a registry the caller owns (never the global one)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        model_registry: ModelRegistryLike,
        *,
        process: bool = True,
        gpu: bool = True,
        routing: RouterLike | None = None,
        statistics: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self.registry = registry
        self.models = ModelCollector(model_registry, statistics)
        registry.register(self.models)
        #: python models' own families (pb_utils.MetricFamily); the server hands it to the model registry
        self.custom = CustomMetrics()
        registry.register(self.custom)
        #: the split, the rollouts' gates and shadow copies, labelled by variant
        self.routing = RoutingCollector(routing) if routing is not None else None
        if self.routing is not None:
            registry.register(self.routing)
        self.process: ProcessCollector | None = ProcessCollector(registry=registry) if process else None
        self.gpu: NvmlCollector | None = None
        if gpu:
            nvml = NvmlCollector()
            if nvml.available:
                registry.register(nvml)
                self.gpu = nvml

    def render(self) -> tuple[bytes, str]:
        return render(self.registry)


def render(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The Prometheus text exposition of ``registry`` and its content type.

    prometheus-client names a counter ``<name>_total`` in its HELP and TYPE lines whatever its samples
    are called; a counter whose samples keep the bare name (python models' custom counters, named as in
    Triton) gets HELP and TYPE lines of that name, so that the three agree.
    """
    text = generate_latest(registry)
    if b" counter\n" in text:
        text = _bare_counters(text)
    return text, CONTENT_TYPE_LATEST


def _bare_counters(text: bytes) -> bytes:
    lines = text.split(b"\n")
    for i, line in enumerate(lines):
        if not (line.startswith(b"# TYPE ") and line.endswith(b"_total counter")):
            continue
        total = line[len(b"# TYPE "):-len(b" counter")]
        bare = total[: -len(b"_total")]
        sample = lines[i + 1] if i + 1 < len(lines) else b""
        if sample.startswith(bare) and not sample.startswith(total) and sample[len(bare):len(bare) + 1] in (b"{", b" "):
            lines[i] = b"# TYPE " + bare + b" counter"
            if i > 0 and lines[i - 1].startswith(b"# HELP " + total + b" "):
                lines[i - 1] = b"# HELP " + bare + lines[i - 1][len(b"# HELP ") + len(total):]
    return b"\n".join(lines)
