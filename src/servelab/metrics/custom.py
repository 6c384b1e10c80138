"""Custom metrics of python models (Triton's ``pb_utils.MetricFamily``), exposed on the server's /metrics.

A model creates families (counter, gauge, histogram) and metrics in them, one per label set; the values
live here, in the server process, whichever process the model runs in: a worker process sends its
updates over its channel (:mod:`servelab.core.workers`), a model in a thread updates this store
directly. Families are shared by name, as in Triton: the three instances of a model that each create
``requests_process_latency_ns{model="m",version="1"}`` add to one counter. Each family remembers who
created it (an *owner*: a model instance); when the last owner goes (unload, a worker restart) the
family and its values go too.

Counters keep the family's name for their samples (no ``_total`` suffix), as Triton prints them.
"""

from __future__ import annotations

import bisect
import itertools
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from servelab.errors import InvalidArgument, NotFound

__all__ = [
    "COUNTER", "GAUGE", "HISTOGRAM", "KINDS", "CustomMetrics", "Labels", "MetricSink", "MetricStore", "check_update",
]

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"
KINDS = (COUNTER, GAUGE, HISTOGRAM)
#: what each kind accepts ("declare" creates a metric, "remove" deletes it)
_OPS = {COUNTER: ("increment",), GAUGE: ("increment", "set"), HISTOGRAM: ("observe",)}
_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
#: families the server itself exports: a model may not take these names
_RESERVED = ("nv_", "servelab_", "process_", "python_")

Labels = tuple[tuple[str, str], ...]


class MetricSink(Protocol):
    """What a model instance's custom metrics talk to (this store bound to an owner, or a worker's proxy)."""

    def family(self, name: str, description: str, kind: str) -> None: ...

    def update(self, op: str, name: str, labels: Labels, value: float = 0.0,
               buckets: Sequence[float] | None = None) -> None: ...

    def value(self, name: str, labels: Labels) -> float: ...


class MetricStore(Protocol):
    """Where model instances keep custom metrics: :class:`CustomMetrics`, or a worker's way to it."""

    def bind(self, owner: str) -> MetricSink: ...

    def forget(self, owner: str) -> None: ...


def check_update(kind: str, op: str, name: str, value: float) -> None:
    """InvalidArgument when ``op`` does not suit a metric of ``kind`` (checked where the model calls it)."""
    if op in ("declare", "remove"):
        return
    if op not in _OPS[kind]:
        allowed = " or ".join(f"{o}()" for o in _OPS[kind])
        raise InvalidArgument(f"metric family '{name}' is a {kind}: it takes {allowed}, not {op}()")
    if kind == COUNTER and value < 0:
        raise InvalidArgument(f"metric family '{name}' is a counter: increment() must be >= 0, got {value}")


@dataclass
class _Histogram:
    bounds: tuple[float, ...]
    counts: list[int]
    total: float = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value


@dataclass
class _Family:
    name: str
    description: str
    kind: str
    owners: set[str] = field(default_factory=set)
    values: dict[Labels, float] = field(default_factory=dict)
    histograms: dict[Labels, _Histogram] = field(default_factory=dict)


def _check_labels(name: str, labels: Labels) -> None:
    for key, value in labels:
        if not _LABEL.match(key) or key.startswith("__"):
            raise InvalidArgument(f"metric family '{name}': label name {key!r} is not a valid Prometheus label name")
        if not isinstance(value, str):
            raise InvalidArgument(f"metric family '{name}': label {key!r} must be a str, got {type(value).__name__}")


def _check_buckets(name: str, buckets: Sequence[float] | None) -> tuple[float, ...]:
    if not buckets:
        raise InvalidArgument(f"metric family '{name}' is a histogram: its Metric needs buckets=[...] (ascending)")
    bounds = tuple(float(b) for b in buckets)
    if any(b >= c for b, c in itertools.pairwise(bounds)):
        raise InvalidArgument(f"metric family '{name}': histogram buckets must be ascending, got {list(bounds)}")
    return bounds


class CustomMetrics(Collector):
    """Every custom metric family of the server, registered on its /metrics registry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}

    # ----- what models do (through an owner's binding) -----
    def bind(self, owner: str) -> MetricSink:
        """The sink of one model instance: what it creates is kept until :meth:`forget` of ``owner``."""
        return _Bound(self, owner)

    def family(self, name: str, description: str, kind: str, owner: str) -> None:
        """Create (or join) a family; a family of that name must have the same kind and description."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise InvalidArgument(f"metric family name {name!r} is not a valid Prometheus metric name")
        if name.startswith(_RESERVED):
            raise InvalidArgument(f"metric family name {name!r}: names starting {list(_RESERVED)} are the server's")
        if kind not in KINDS:
            raise InvalidArgument(f"metric family '{name}': kind must be one of {list(KINDS)}, got {kind!r}")
        with self._lock:
            found = self._families.get(name)
            if found is None:
                found = self._families[name] = _Family(name, str(description), kind)
            elif (found.kind, found.description) != (kind, str(description)):
                raise InvalidArgument(
                    f"metric family '{name}' already exists as a {found.kind} described {found.description!r}; "
                    f"a family of that name must have the same kind and description (got a {kind} "
                    f"described {description!r})"
                )
            found.owners.add(owner)

    def update(self, op: str, name: str, labels: Labels, value: float = 0.0,
               buckets: Sequence[float] | None = None) -> None:
        """Apply ``op`` (declare, increment, set, observe, remove) to the metric ``labels`` of family ``name``."""
        with self._lock:
            family = self._get(name)
            check_update(family.kind, op, name, value)
            if op == "remove":
                family.values.pop(labels, None)
                family.histograms.pop(labels, None)
            elif family.kind == HISTOGRAM:
                self._histogram(family, labels, op, value, buckets)
            elif op == "declare":
                _check_labels(name, labels)
                family.values.setdefault(labels, 0.0)
            elif op == "set":
                family.values[labels] = float(value)
            else:
                family.values[labels] = family.values.get(labels, 0.0) + float(value)

    def _histogram(self, family: _Family, labels: Labels, op: str, value: float,
                   buckets: Sequence[float] | None) -> None:
        hist = family.histograms.get(labels)
        if op == "declare":
            if hist is None:
                _check_labels(family.name, labels)
                bounds = _check_buckets(family.name, buckets)
                family.histograms[labels] = _Histogram(bounds, [0] * (len(bounds) + 1))
            return
        if hist is None:
            raise NotFound(f"metric family '{family.name}' has no metric with labels {dict(labels)}")
        hist.observe(float(value))

    def value(self, name: str, labels: Labels) -> float:
        with self._lock:
            family = self._get(name)
            if family.kind == HISTOGRAM:
                raise InvalidArgument(f"metric family '{name}' is a histogram: it has no single value()")
            try:
                return family.values[labels]
            except KeyError:
                raise NotFound(f"metric family '{name}' has no metric with labels {dict(labels)}") from None

    def forget(self, owner: str) -> None:
        """``owner`` has gone: families nobody else created go with their values."""
        with self._lock:
            for name in list(self._families):
                family = self._families[name]
                family.owners.discard(owner)
                if not family.owners:
                    del self._families[name]

    def _get(self, name: str) -> _Family:
        family = self._families.get(name)
        if family is None:
            raise NotFound(f"no custom metric family '{name}': create it with pb_utils.MetricFamily first")
        return family

    # ----- scrape -----
    def collect(self) -> Iterator[Metric]:
        with self._lock:
            families = [(f.name, f.description, f.kind, dict(f.values), {k: (h.bounds, list(h.counts), h.total)
                         for k, h in f.histograms.items()}) for f in self._families.values()]  # fmt: skip
        for name, description, kind, values, histograms in families:
            if kind == HISTOGRAM:
                yield _histogram_family(name, description, histograms)
                continue
            metric = Metric(name, description, kind)
            for labels, value in sorted(values.items()):
                metric.add_sample(name, dict(sorted(labels)), value)
            yield metric


def _histogram_family(name: str, description: str,
                      histograms: dict[Labels, tuple[tuple[float, ...], list[int], float]]) -> Metric:
    keys = sorted({k for labels in histograms for k, _ in labels})
    family = HistogramMetricFamily(name, description, labels=keys)
    for labels, (bounds, counts, total) in sorted(histograms.items()):
        given = dict(labels)
        cumulative, running = [], 0
        for bound, count in zip([*bounds, float("inf")], counts, strict=True):
            running += count
            cumulative.append(("+Inf" if bound == float("inf") else repr(bound), running))
        family.add_metric([given.get(k, "") for k in keys], cumulative, total)
    return family


class _Bound:
    """:class:`CustomMetrics` as one owner sees it."""

    def __init__(self, store: CustomMetrics, owner: str) -> None:
        self.store = store
        self.owner = owner

    def family(self, name: str, description: str, kind: str) -> None:
        self.store.family(name, description, kind, self.owner)

    def update(self, op: str, name: str, labels: Labels, value: float = 0.0,
               buckets: Sequence[float] | None = None) -> None:
        self.store.update(op, name, labels, value, buckets)

    def value(self, name: str, labels: Labels) -> float:
        return self.store.value(name, labels)
