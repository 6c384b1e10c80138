"""LatencyHistogram precision, merging and serialisation; the stability rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.bench.results import is_stable
from servelab.bench.stats import PERCENTILES, LatencyHistogram, WindowStats

PRECISION = 0.01


def _within(measured: float, exact: float, precision: float = PRECISION) -> bool:
    return abs(measured - exact) <= precision * exact + 1e-12


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(min_value=1e-6, max_value=100.0, allow_nan=False), min_size=1, max_size=400),
    st.sampled_from(PERCENTILES),
)
def test_percentiles_match_numpy_within_precision(values: list[float], q: float) -> None:
    hist = LatencyHistogram(PRECISION)
    for v in values:
        hist.record(v)
    exact = float(np.percentile(np.array(values), q, method="inverted_cdf"))
    assert _within(hist.percentile(q), exact), (hist.percentile(q), exact)


def test_vectorised_record_equals_scalar_record() -> None:
    rng = np.random.default_rng(1)
    values = rng.lognormal(mean=-5, sigma=1.5, size=5_000)
    a, b = LatencyHistogram(), LatencyHistogram()
    for v in values:
        a.record(float(v))
    b.record_many(values)
    for q in PERCENTILES:
        assert a.percentile(q) == b.percentile(q)
    assert a.count == b.count == 5_000
    assert math.isclose(a.sum_s, b.sum_s)


def test_p999_of_a_heavy_tail_is_resolved() -> None:
    values = np.concatenate([np.full(99_900, 0.002), np.full(100, 0.5)])
    hist = LatencyHistogram()
    hist.record_many(values)
    assert _within(hist.percentile(99.9), 0.002)  # rank 99,900 is still the fast mode
    hist.record(0.5)
    assert _within(hist.percentile(99.9), 0.5)
    assert _within(hist.percentile(50), 0.002)


def test_merge_equals_recording_everything_in_one() -> None:
    rng = np.random.default_rng(2)
    parts = [rng.exponential(0.01, size=n) for n in (100, 2_000, 7)]
    merged, whole = LatencyHistogram(), LatencyHistogram()
    for p in parts:
        h = LatencyHistogram()
        h.record_many(p)
        merged.merge(LatencyHistogram.from_dict(h.to_dict()))  # as if sent by a worker process
    whole.record_many(np.concatenate(parts))
    assert merged.count == whole.count
    assert merged.min_s == whole.min_s and merged.max_s == whole.max_s
    for q in PERCENTILES:
        assert merged.percentile(q) == whole.percentile(q)


def test_merge_refuses_different_layouts() -> None:
    with pytest.raises(ValueError, match="precision"):
        LatencyHistogram(0.01).merge(LatencyHistogram(0.02))


def test_empty_histogram_and_bad_arguments() -> None:
    hist = LatencyHistogram()
    assert math.isnan(hist.percentile(50))
    with pytest.raises(ValueError, match="percentile"):
        hist.percentile(0)
    with pytest.raises(ValueError, match="precision"):
        LatencyHistogram(0.5)


def test_out_of_range_values_are_clamped_to_recorded_extremes() -> None:
    hist = LatencyHistogram()
    hist.record_many(np.array([1e-9, 5e3]))
    assert hist.percentile(50) == pytest.approx(1e-9)
    assert hist.percentile(100) == pytest.approx(5e3)


def _window(rps: float, p50_s: float, duration_s: float = 1.0) -> WindowStats:
    w = WindowStats(duration_s)
    w.histogram.record_many(np.full(int(rps * duration_s), p50_s))
    return w


def test_concurrent_merge_adds_rates() -> None:
    a, b = _window(100, 0.01), _window(300, 0.01, duration_s=0.5)
    a.merge_concurrent(b)
    assert a.requests_per_s == pytest.approx(400)
    assert a.completed == 250


def test_stability_rule_uses_last_three_windows() -> None:
    agree = [_window(50, 0.05), _window(100, 0.010), _window(104, 0.0102), _window(98, 0.0099)]
    assert is_stable(agree, 10.0)
    assert not is_stable(agree[:3], 10.0)  # the 50 rps window is among the last three
    assert not is_stable(agree[1:3], 10.0)  # fewer than three windows is never stable
    drifting = [_window(100, 0.010), _window(100, 0.012), _window(100, 0.014)]
    assert not is_stable(drifting, 10.0)
    assert is_stable(drifting, 50.0)
    assert not is_stable([WindowStats(1.0)] * 3, 10.0)  # empty windows are not stable
