"""Parsing Triton-format statistics and splitting them per request."""

from __future__ import annotations

import os

import pytest

from servelab.bench.serverstats import _parse_http_stats, rss_bytes, split_per_request_us


def _doc(n: int, queue_ns: int, infer_ns: int, version: str = "1") -> dict[str, object]:
    stage = lambda c, ns: {"count": c, "ns": ns}  # noqa: E731
    return {
        "model_stats": [
            {
                "name": "m",
                "version": version,
                "inference_stats": {
                    "success": stage(n, queue_ns + infer_ns),
                    "queue": stage(n, queue_ns),
                    "compute_input": stage(n, 0),
                    "compute_infer": stage(str(n), str(infer_ns)),  # gRPC's JSON form gives uint64 as strings
                    "compute_output": stage(n, 0),
                },
            },
            {"name": "other", "version": "1", "inference_stats": {"success": stage(999, 999)}},
        ]
    }


def test_split_per_request_between_two_snapshots() -> None:
    before = _parse_http_stats(_doc(10, 10_000_000, 5_000_000), "m", "")
    after = _parse_http_stats(_doc(110, 210_000_000, 55_000_000), "m", "")
    split = split_per_request_us(before, after)
    assert split == {
        "queue_us": pytest.approx(2000.0),
        "compute_input_us": 0.0,
        "compute_infer_us": pytest.approx(500.0),
        "compute_output_us": 0.0,
        "requests": 100.0,
    }
    assert split_per_request_us(after, after) is None  # no new successes: nothing to divide


def test_version_filter_and_missing_model() -> None:
    doc = _doc(10, 1, 1, version="2")
    assert _parse_http_stats(doc, "m", "1")["success"] == (0, 0)
    assert _parse_http_stats(doc, "m", "2")["success"] == (10, 2)
    assert _parse_http_stats({}, "m", "")["queue"] == (0, 0)


def test_rss_of_this_process_and_of_a_missing_one() -> None:
    assert (rss_bytes(os.getpid()) or 0) > 1_000_000
    assert rss_bytes(2**22 + 12345) is None
