"""``pb_utils.MetricFamily`` / ``Metric``: a python model's own Prometheus metrics, on the server's /metrics.

Updates go to the server (:mod:`servelab.metrics.custom`) through the services the backend installed;
what a kind does not allow (a counter's set(), a negative increment) is refused here, in the model's
own call, with a TritonModelException.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from servelab.backends.pb_utils import _runtime
from servelab.backends.pb_utils._errors import TritonModelException
from servelab.errors import ServelabError
from servelab.metrics.custom import COUNTER, GAUGE, HISTOGRAM, Labels, MetricSink, check_update

__all__ = ["Metric", "MetricFamily"]

_KIND_NAMES = (COUNTER, GAUGE, HISTOGRAM)


def _sink() -> MetricSink:
    sink = _runtime.current().metrics
    assert sink is not None, "pb_utils always has a metrics sink (a local one outside a server)"
    return sink


class Metric:
    """One metric (a label set) of a family; made by :meth:`MetricFamily.Metric`."""

    __slots__ = ("_family", "_labels", "_sink")

    def __init__(self, family: MetricFamily, labels: Labels, buckets: Sequence[float] | None) -> None:
        self._family = family
        self._labels = labels
        self._sink = _sink()
        self._call("declare", 0.0, buckets)

    def _call(self, op: str, value: float, buckets: Sequence[float] | None = None) -> None:
        family = self._family
        try:
            check_update(family.kind, op, family.name, value)
            self._sink.update(op, family.name, self._labels, value, buckets)
        except ServelabError as exc:
            raise TritonModelException(exc.message) from None

    def increment(self, value: float) -> None:
        self._call("increment", float(value))

    def set(self, value: float) -> None:
        self._call("set", float(value))

    def observe(self, value: float) -> None:
        self._call("observe", float(value))

    def value(self) -> float:
        """The current value, as the server holds it (shared with other instances using the same labels)."""
        try:
            return self._sink.value(self._family.name, self._labels)
        except ServelabError as exc:
            raise TritonModelException(exc.message) from None


class MetricFamily:
    """A named family of metrics: ``MetricFamily(name, description, kind=MetricFamily.COUNTER)``."""

    COUNTER: ClassVar[int] = 0
    GAUGE: ClassVar[int] = 1
    HISTOGRAM: ClassVar[int] = 2

    def __init__(self, name: str, description: str, kind: int) -> None:
        if kind not in (self.COUNTER, self.GAUGE, self.HISTOGRAM):
            raise TritonModelException(
                f"MetricFamily '{name}': kind must be MetricFamily.COUNTER, GAUGE or HISTOGRAM, got {kind!r}"
            )
        self.name = name
        self.description = description
        self.kind = _KIND_NAMES[kind]
        try:
            _sink().family(name, description, self.kind)
        except ServelabError as exc:
            raise TritonModelException(exc.message) from None

    def Metric(self, labels: Mapping[str, str] | None = None,
               buckets: Sequence[float] | None = None) -> Metric:
        """The metric of this family with these labels (created at 0; a histogram needs ``buckets``)."""
        pairs = tuple(sorted((str(k), v) for k, v in (labels or {}).items()))
        if self.kind != HISTOGRAM and buckets is not None:
            raise TritonModelException(f"MetricFamily '{self.name}' is a {self.kind}: only histograms take buckets")
        return Metric(self, pairs, list(buckets) if buckets is not None else None)
