"""Python models' custom metrics in the server: shared families, owners, and Triton's exposition."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from servelab.errors import InvalidArgument, NotFound
from servelab.metrics import CustomMetrics, render


@pytest.fixture
def store() -> CustomMetrics:
    return CustomMetrics()


def _text(store: CustomMetrics) -> str:
    registry = CollectorRegistry()
    registry.register(store)
    return render(registry)[0].decode()


def test_instances_creating_one_family_share_its_metrics(store: CustomMetrics) -> None:
    labels = (("model", "m"), ("version", "1"))
    for owner in ("m/1/a", "m/1/b", "m/1/c"):
        sink = store.bind(owner)
        sink.family("requests_process_latency_ns", "Cumulative time spent processing requests", "counter")
        sink.update("declare", "requests_process_latency_ns", labels)
        sink.update("increment", "requests_process_latency_ns", labels, 10)
    assert store.value("requests_process_latency_ns", labels) == 30
    text = _text(store)
    assert "# HELP requests_process_latency_ns Cumulative time spent processing requests\n" in text
    assert "# TYPE requests_process_latency_ns counter\n" in text
    assert 'requests_process_latency_ns{model="m",version="1"} 30.0\n' in text


def test_a_family_goes_with_its_last_owner(store: CustomMetrics) -> None:
    store.family("g", "depth", "gauge", "a")
    store.family("g", "depth", "gauge", "b")
    store.update("set", "g", (("k", "v"),), 2)
    store.forget("a")
    assert store.value("g", (("k", "v"),)) == 2
    store.forget("b")
    with pytest.raises(NotFound, match="create it with pb_utils.MetricFamily"):
        store.value("g", (("k", "v"),))
    assert "depth" not in _text(store)


def test_histograms_export_cumulative_buckets(store: CustomMetrics) -> None:
    store.family("latency_s", "latency", "histogram", "o")
    store.update("declare", "latency_s", (("model", "m"),), 0.0, [0.1, 1.0])
    for value in (0.05, 0.5, 0.7, 3.0):
        store.update("observe", "latency_s", (("model", "m"),), value)
    text = _text(store)
    assert 'latency_s_bucket{le="0.1",model="m"} 1.0' in text and 'latency_s_bucket{le="1.0",model="m"} 3.0' in text
    assert 'latency_s_bucket{le="+Inf",model="m"} 4.0' in text and 'latency_s_count{model="m"} 4.0' in text
    with pytest.raises(InvalidArgument, match="no single value"):
        store.value("latency_s", (("model", "m"),))


@pytest.mark.parametrize(("call", "match"), [
    (lambda s: s.family("bad name", "d", "counter", "o"), "not a valid Prometheus metric name"),
    (lambda s: s.family("nv_mine", "d", "counter", "o"), "are the server's"),
    (lambda s: s.family("c", "d", "summary", "o"), "kind must be one of"),
    (lambda s: s.family("c", "other description", "counter", "o"), "same kind and description"),
    (lambda s: s.update("set", "c", ()), "takes increment"),
    (lambda s: s.update("increment", "c", (), -1), ">= 0"),
    (lambda s: s.update("declare", "c", (("__x", "v"),)), "not a valid Prometheus label name"),
    (lambda s: s.update("increment", "missing", ()), "no custom metric family 'missing'"),
])  # fmt: skip
def test_bad_families_and_updates_are_refused_by_name(store: CustomMetrics, call: object, match: str) -> None:
    store.family("c", "d", "counter", "o")
    with pytest.raises((InvalidArgument, NotFound), match=match):
        call(store)  # type: ignore[operator]


def test_the_servers_own_counters_keep_their_exposition(store: CustomMetrics) -> None:
    from prometheus_client import Counter

    registry = CollectorRegistry()
    Counter("ordinary", "an ordinary counter", registry=registry).inc()
    text = render(registry)[0].decode()
    assert "# TYPE ordinary_total counter\nordinary_total 1.0" in text
