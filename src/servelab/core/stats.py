"""Per-model-version statistics in Triton's shape (the statistics extension)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Duration", "ModelStats", "merge_statistics"]


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def as_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(slots=True)
class BatchStats:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


class ModelStats:
    """Counters for one model version. Requests record success/fail; executions record batch stats."""

    def __init__(self, name: str, version: int) -> None:
        self.name = name
        self.version = version
        self._lock = threading.Lock()
        self.last_inference_ms = 0
        self.inference_count = 0
        self.execution_count = 0
        self.success = Duration()
        self.fail = Duration()
        self.queue = Duration()
        self.compute_input = Duration()
        self.compute_infer = Duration()
        self.compute_output = Duration()
        self.cache_hit = Duration()
        self.cache_miss = Duration()
        #: front-end time per request: wire decode before the data plane, encode after it
        self.wire_decode = Duration()
        self.wire_encode = Duration()
        self.batches: dict[int, BatchStats] = {}

    def record_execution(
        self, batch_size: int, requests: int, input_ns: int, infer_ns: int, output_ns: int, queue_ns: int | None = None
    ) -> None:
        """One backend execution over ``requests`` requests holding ``batch_size`` inferences; ``queue_ns``, for
        one request run alone that succeeded, is its queue time (:meth:`record_queue` in the same lock)."""
        with self._lock:  # the additions written out: a method call each cost more than the lock
            if queue_ns is not None:
                q = self.queue
                q.count += 1
                q.ns += queue_ns
            self.execution_count += 1
            self.inference_count += batch_size
            b = self.batches.get(batch_size)
            if b is None:
                b = self.batches[batch_size] = BatchStats()
            d = b.compute_input
            d.count += 1
            d.ns += input_ns
            d = b.compute_infer
            d.count += 1
            d.ns += infer_ns
            d = b.compute_output
            d.count += 1
            d.ns += output_ns
            # per-request durations, as Triton reports them
            d = self.compute_input
            d.count += requests
            d.ns += input_ns * requests
            d = self.compute_infer
            d.count += requests
            d.ns += infer_ns * requests
            d = self.compute_output
            d.count += requests
            d.ns += output_ns * requests

    def record_request(self, ok: bool, total_ns: int) -> None:
        """One answered request (its queue time comes from the scheduler, :meth:`record_queue`)."""
        with self._lock:
            (self.success if ok else self.fail).add(total_ns)
            self.last_inference_ms = int(time.time() * 1000)

    def record_queue(self, ns: int) -> None:
        """Queue time of one request that then succeeded (Triton counts successful requests only)."""
        with self._lock:
            self.queue.add(ns)

    def record_wire(self, decode_ns: int, encode_ns: int) -> None:
        with self._lock:
            self.wire_decode.add(decode_ns)
            self.wire_encode.add(encode_ns)

    def record_cache(self, hit: bool, ns: int) -> None:
        with self._lock:
            (self.cache_hit if hit else self.cache_miss).add(ns)

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "name": self.name,
                "version": str(self.version),
                "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "inference_stats": {
                    "success": self.success.as_dict(),
                    "fail": self.fail.as_dict(),
                    "queue": self.queue.as_dict(),
                    "compute_input": self.compute_input.as_dict(),
                    "compute_infer": self.compute_infer.as_dict(),
                    "compute_output": self.compute_output.as_dict(),
                    "cache_hit": self.cache_hit.as_dict(),
                    "cache_miss": self.cache_miss.as_dict(),
                },
                "wire_stats": {"decode": self.wire_decode.as_dict(), "encode": self.wire_encode.as_dict()},
                "batch_stats": [
                    {
                        "batch_size": size,
                        "compute_input": b.compute_input.as_dict(),
                        "compute_infer": b.compute_infer.as_dict(),
                        "compute_output": b.compute_output.as_dict(),
                    }
                    for size, b in sorted(self.batches.items())
                ],
            }


def merge_statistics(per_process: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Several processes' ``model_stats`` rows as one server's: rows of the same model and version summed
    (counts and nanoseconds added, ``last_inference`` the latest, batch rows matched by batch size), in
    the first list's order, then rows only the others have."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for rows in per_process:
        for row in rows:
            key = (row["name"], row["version"])
            merged[key] = _sum(merged[key], row) if key in merged else row
    return list(merged.values())


def _sum(a: Any, b: Any, key: str = "") -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: _sum(a[k], b[k], k) if k in a and k in b else a.get(k, b.get(k)) for k in {**a, **b}}
    if key == "batch_stats" and isinstance(a, list) and isinstance(b, list):
        rows = {r["batch_size"]: r for r in a}
        for r in b:
            rows[r["batch_size"]] = _sum(rows[r["batch_size"]], r) if r["batch_size"] in rows else r
        return [rows[size] for size in sorted(rows)]
    if key == "last_inference":
        return max(a, b)
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int | float) or not isinstance(b, int | float):
        return a  # names, versions: the same in every process
    return a + b
