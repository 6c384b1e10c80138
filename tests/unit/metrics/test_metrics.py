"""Prometheus metrics read from a real Engine: Triton's nv_* counts equal the statistics extension and
the requests sent; histograms, pending gauge, process metrics; registries are passed in, never global."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from harness.models import XY, unary_onnx
from harness.repository import io_config, write_config
from servelab.engine import Engine
from servelab.errors import ServelabError
from servelab.metrics import LATENCY_BUCKETS_S, ServerMetrics, render
from servelab.metrics.gpu import NvmlCollector


def _repo(root: Path) -> None:
    """``relu``: FP32 [4] on onnxruntime with dynamic batching and the response cache."""
    unary_onnx(root / "relu" / "1" / "model.onnx", "Relu", io=XY)
    extra = "dynamic_batching { max_queue_delay_microseconds: 100 }\nresponse_cache { enable: true }\n"
    write_config(root / "relu", io_config("relu", 'backend: "onnxruntime"', "FP32", [4], io=XY, extra=extra))


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    _repo(tmp_path)
    with Engine(tmp_path) as e:
        yield e  # type: ignore[misc]


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


LABELS = (("model", "relu"), ("version", "1"))


def test_counts_match_requests_and_statistics(engine: Engine) -> None:
    registry = CollectorRegistry()
    metrics = ServerMetrics(registry, engine.dataplane.registry)
    rng = np.random.default_rng(0)
    for i in range(6):
        engine.infer("relu", {"x": rng.standard_normal((1 + i % 3, 4)).astype(np.float32)})
    repeat = np.ones((2, 4), np.float32)
    engine.infer("relu", {"x": repeat})
    engine.infer("relu", {"x": repeat})  # cache hit
    for _ in range(3):
        with pytest.raises(ServelabError):
            engine.infer("relu", {"x": np.ones((1, 5), np.float32)})  # wrong shape
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain")
    samples = _samples(body.decode())
    stats = engine.get_inference_statistics("relu")["model_stats"][0]
    rows = sum(1 + i % 3 for i in range(6)) + 2  # executed rows: the cache hit runs nothing

    def get(name: str) -> float:
        return samples[(name, LABELS)]

    assert get("nv_inference_request_success") == 8 == stats["inference_stats"]["success"]["count"]
    assert get("nv_inference_request_failure") == 3
    assert get("nv_inference_count") == rows == stats["inference_count"]
    assert get("nv_inference_exec_count") == 7 == stats["execution_count"]
    assert get("nv_cache_num_hits_per_model") == 1 and get("nv_cache_num_misses_per_model") == 7
    assert get("nv_inference_request_duration_us") == pytest.approx(stats["inference_stats"]["success"]["ns"] / 1e3)
    assert get("nv_inference_queue_duration_us") > 0
    assert get("nv_inference_compute_infer_duration_us") > 0
    assert get("nv_inference_pending_request_count") == 0
    assert get("servelab_request_duration_seconds_count") == 8
    assert get("servelab_queue_duration_seconds_count") == 7
    assert get("servelab_compute_duration_seconds_count") == 7
    assert get("servelab_batch_size_count") == 7 and get("servelab_batch_size_sum") == rows
    inf = samples[("servelab_request_duration_seconds_bucket", tuple(sorted((*LABELS, ("le", "+Inf")))))]
    assert inf == 8
    buckets = [k for k in samples if k[0] == "servelab_request_duration_seconds_bucket"]
    assert len(buckets) == len(LATENCY_BUCKETS_S) + 1
    assert ("process_cpu_seconds_total", ()) in samples
    assert ("process_resident_memory_bytes", ()) in samples


def test_histogram_buckets_span_50us_to_10s() -> None:
    assert LATENCY_BUCKETS_S[0] == pytest.approx(50e-6) and LATENCY_BUCKETS_S[-1] == pytest.approx(10.0)
    ratios = [b / a for a, b in itertools.pairwise(LATENCY_BUCKETS_S)]
    assert max(ratios) <= 1.7  # neighbouring buckets close enough for P99 interpolation


def test_registries_are_independent_and_never_the_global_one(engine: Engine) -> None:
    before = set(REGISTRY._names_to_collectors)
    a, b = CollectorRegistry(), CollectorRegistry()
    ServerMetrics(a, engine.dataplane.registry)
    ServerMetrics(b, engine.dataplane.registry, process=False)
    assert set(REGISTRY._names_to_collectors) == before
    engine.infer("relu", {"x": np.ones((1, 4), np.float32)})
    sa, sb = _samples(render(a)[0].decode()), _samples(render(b)[0].decode())
    assert sa[("nv_inference_request_success", LABELS)] == sb[("nv_inference_request_success", LABELS)] == 1
    assert ("process_cpu_seconds_total", ()) in sa and ("process_cpu_seconds_total", ()) not in sb


def test_unloaded_versions_disappear(engine: Engine) -> None:
    registry = CollectorRegistry()
    ServerMetrics(registry, engine.dataplane.registry, process=False)
    engine.infer("relu", {"x": np.ones((1, 4), np.float32)})
    assert ("nv_inference_count", LABELS) in _samples(render(registry)[0].decode())
    engine.unload_model("relu")
    assert ("nv_inference_count", LABELS) not in _samples(render(registry)[0].decode())


def test_gpu_collector_is_empty_or_well_formed() -> None:
    nvml = NvmlCollector()
    families = list(nvml.collect())
    if not nvml.available:
        assert families == []  # no pynvml / driver / GPU: nothing, and no error
        return
    names = {f.name for f in families}
    assert names == {"nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes"}
    for f in families:
        assert all("gpu_uuid" in s.labels for s in f.samples)


def test_one_executions_observations_share_a_lock_and_add_up_across_threads() -> None:
    """observe_execution fills three histograms under the version's one lock: from 4 threads at once, every
    observation lands, and a plain observe on any of them takes that same lock."""
    import threading

    from servelab.metrics.histograms import ModelHistograms

    h = ModelHistograms()
    assert h.compute._lock is h.queue._lock is h.batch_size._lock is h.request._lock

    def hammer() -> None:
        for i in range(5000):
            h.observe_execution(1e-4, 1 + i % 3, 2e-5)
            h.request.observe(3e-4)

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for histogram in (h.compute, h.batch_size, h.queue, h.request):
        assert histogram.snapshot()[2] == 20000
    assert h.batch_size.snapshot()[1] == 4 * sum(1 + i % 3 for i in range(5000))
    h.observe_execution(1e-4, 2)  # batched executions have no single queue time
    assert (h.compute.count, h.queue.count) == (20001, 20000)
