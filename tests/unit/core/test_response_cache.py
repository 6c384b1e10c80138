"""The response cache: keys, LRU by bytes, read-only answers, and hits/misses through the schedulers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from batching_testutil import config, doubling, rows, stats

from harness.data import weights
from harness.models import XY
from harness.repository import dense_model
from servelab.core.batching import make_scheduler, scheduler_factory
from servelab.core.cache import ResponseCache, cache_key
from servelab.engine import Engine


def test_key_covers_model_version_names_dtypes_shapes_and_data() -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    base = cache_key("m", 1, {"x": x})
    assert cache_key("m", 1, {"x": x.copy()}) == base
    assert cache_key("m", 1, {"x": np.asfortranarray(x)}) == base  # layout does not matter
    different = [
        cache_key("n", 1, {"x": x}),
        cache_key("m", 2, {"x": x}),
        cache_key("m", 1, {"z": x}),
        cache_key("m", 1, {"x": x.astype(np.int32)}),
        cache_key("m", 1, {"x": x.reshape(4, 2)}),
        cache_key("m", 1, {"x": x + 1}),
    ]
    assert len({base, *different}) == 7


def test_key_of_bytes_tensors_uses_their_contents() -> None:
    a = np.array([b"ab", b"c"], dtype=object)
    b = np.array([b"a", b"bc"], dtype=object)
    assert cache_key("m", 1, {"s": a}) != cache_key("m", 1, {"s": b})
    assert cache_key("m", 1, {"s": a}) == cache_key("m", 1, {"s": np.array([b"ab", b"c"], dtype=object)})


def test_lru_eviction_by_bytes() -> None:
    one_kib = {"y": np.zeros(256, np.float32)}  # 1024 bytes + bookkeeping
    cache = ResponseCache(max_bytes=3 * 1200)
    for k in (b"a", b"b", b"c"):
        assert cache.put(k, one_kib)
    assert cache.get(b"a") is not None  # a is now the most recent
    cache.put(b"d", one_kib)
    assert cache.get(b"b") is None and cache.get(b"a") is not None and cache.get(b"d") is not None
    assert len(cache) == 3 and cache.used_bytes <= cache.max_bytes and cache.evictions == 1
    assert not cache.put(b"huge", {"y": np.zeros(4096, np.float32)})
    assert cache.hits == 3 and cache.misses == 1


def test_cached_answers_are_private_read_only_copies() -> None:
    cache = ResponseCache(1 << 20)
    y = np.ones(4, np.float32)
    cache.put(b"k", {"y": y})
    y[:] = 7  # the caller's array changes afterwards
    hit = cache.get(b"k")
    assert hit is not None and hit["y"].tolist() == [1, 1, 1, 1]
    with pytest.raises(ValueError):
        hit["y"][0] = 3


@pytest.mark.parametrize("batching", [False, True])
def test_scheduler_serves_repeats_from_the_cache(batching: bool) -> None:
    cfg = config(4, delay_us=0 if batching else None, cache=True)
    backends = doubling(cfg)
    s = make_scheduler(backends, stats(), cfg)
    x = rows(2)
    try:
        first = s.run({"x": x})
        second = asyncio.run(s.run_async({"x": x.copy()}))
        third = s.run({"x": x + 1})
    finally:
        s.close()
    np.testing.assert_array_equal(first["y"], 2 * x)
    np.testing.assert_array_equal(second["y"], 2 * x)
    np.testing.assert_array_equal(third["y"], 2 * (x + 1))
    assert backends[0].calls == 2
    d = s.stats.as_dict()["inference_stats"]
    assert d["cache_hit"]["count"] == 1 and d["cache_miss"]["count"] == 2
    assert s.stats.execution_count == 2  # a hit runs nothing


def test_failed_requests_count_as_misses_and_are_not_stored() -> None:
    cfg = config(4, cache=True)
    backends = doubling(cfg)
    s = make_scheduler(backends, stats(), cfg)
    bad = rows(1, value=float("nan"))
    try:
        for _ in range(2):
            with pytest.raises(Exception, match="NaN"):
                s.run({"x": bad})
    finally:
        s.close()
    assert backends[0].calls == 2
    assert s.stats.as_dict()["inference_stats"]["cache_miss"]["count"] == 2


def test_cache_is_used_only_when_the_config_enables_it() -> None:
    shared = ResponseCache(1 << 20)
    factory = scheduler_factory(shared)
    on, off = config(4, cache=True), config(4)
    s_on, s_off = factory(doubling(on), stats(), on), factory(doubling(off), stats(), off)
    try:
        assert s_on.cache is shared and s_off.cache is None
    finally:
        s_on.close()
        s_off.close()


def test_engine_with_response_cache_enabled(tmp_path: Path) -> None:
    w = weights(4, 3)
    dense_model(tmp_path, "lin", w, io=XY, max_batch_size=8, extra="response_cache { enable: true }\n")
    x = rows(3)
    with Engine(tmp_path) as engine:
        outs = [engine.infer("lin", {"x": x}) for _ in range(3)]
        s = engine.get_inference_statistics("lin")["model_stats"][0]
    for out in outs:
        np.testing.assert_allclose(out["y"], x @ w, rtol=1e-5, atol=1e-5)
    assert s["inference_stats"]["cache_hit"]["count"] == 2
    assert s["inference_stats"]["cache_miss"]["count"] == 1
    assert s["inference_stats"]["success"]["count"] == 3 and s["execution_count"] == 1
