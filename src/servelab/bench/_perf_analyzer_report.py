"""What perf_analyzer writes, read into servelab's result types.

``-f report.csv`` holds one row per load level with perf_analyzer's own figures (inferences/s, client-side
percentiles in microseconds, the server-side split it reads from the statistics extension).
``--profile-export-file`` holds every request's send and response timestamps and the boundaries of the
measurement windows; from those, :func:`windows_from_export` rebuilds the windows as servelab's
``WindowStats`` (a request counts in a window when it was sent and answered inside it, as perf_analyzer
counts it), so a perf_analyzer level has the same histogram, percentiles and JSON as a built-in one.
"""

from __future__ import annotations

import csv
import io
import itertools
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from servelab.bench.stats import WindowStats
from servelab.errors import InvalidArgument

__all__ = ["Reported", "parse_csv", "server_split", "windows_from_export"]

#: CSV header -> Reported field
_COLUMNS = {
    "Concurrency": "level", "Request Rate": "level", "Inferences/Second": "inferences_per_s",
    "Client Send": "client_send_us", "Network+Server Send/Recv": "network_us", "Server Queue": "server_queue_us",
    "Server Compute Input": "server_compute_input_us", "Server Compute Infer": "server_compute_infer_us",
    "Server Compute Output": "server_compute_output_us", "Client Recv": "client_recv_us",
    "p50 latency": "p50_us", "p90 latency": "p90_us", "p95 latency": "p95_us", "p99 latency": "p99_us",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Reported:
    """One CSV row: perf_analyzer's figures for one level, as it printed them (times in microseconds)."""

    level: float
    inferences_per_s: float
    p50_us: float
    p90_us: float
    p95_us: float
    p99_us: float
    client_send_us: float = 0.0
    network_us: float = 0.0
    client_recv_us: float = 0.0
    server_queue_us: float = 0.0
    server_compute_input_us: float = 0.0
    server_compute_infer_us: float = 0.0
    server_compute_output_us: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def parse_csv(text: str) -> list[Reported]:
    """The rows of a ``-f`` report; InvalidArgument naming the missing columns when it is not one."""
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise InvalidArgument("perf_analyzer's CSV report has no rows")
    needed = {"Inferences/Second", "p50 latency", "p99 latency"}
    missing = needed - set(rows[0])
    if missing or not ({"Concurrency", "Request Rate"} & set(rows[0])):
        raise InvalidArgument(
            f"perf_analyzer's CSV report lacks {sorted(missing) or ['Concurrency or Request Rate']}; "
            f"its header is {list(rows[0])}"
        )
    out = []
    for row in rows:
        values = {_COLUMNS[k]: float(v) for k, v in row.items() if k in _COLUMNS and v not in (None, "")}
        out.append(Reported(**values))
    return sorted(out, key=lambda r: r.level)


def server_split(reported: Reported) -> dict[str, float]:
    """perf_analyzer's server-side line in the keys of ``LevelResult.server``."""
    return {
        "queue_us": reported.server_queue_us,
        "compute_input_us": reported.server_compute_input_us,
        "compute_infer_us": reported.server_compute_infer_us,
        "compute_output_us": reported.server_compute_output_us,
    }


def _experiment(doc: dict[str, Any], level: float) -> dict[str, Any]:
    experiments = doc.get("experiments", [])
    for exp in experiments:
        if float(exp.get("experiment", {}).get("value", -1)) == float(level):
            return exp
    have = [e.get("experiment", {}).get("value") for e in experiments]
    raise InvalidArgument(f"perf_analyzer's profile export has no experiment at level {level:g}; it has {have}")


def windows_from_export(doc: dict[str, Any], level: float, batch_size: int = 1) -> tuple[list[WindowStats], int]:
    """(the measurement windows of ``level`` as WindowStats, requests sent) from a profile export."""
    exp = _experiment(doc, level)
    requests = exp.get("requests", [])
    sent = np.array([r["timestamp"] for r in requests if r.get("response_timestamps")], dtype=np.int64)
    done = np.array([r["response_timestamps"][-1] for r in requests if r.get("response_timestamps")], dtype=np.int64)
    bounds = [int(b) for b in exp.get("window_boundaries", [])]
    windows = []
    for lo, hi in itertools.pairwise(bounds):
        inside = (sent >= lo) & (done <= hi)
        window = WindowStats((hi - lo) / 1e9, batch_size=batch_size)
        window.histogram.record_many((done[inside] - sent[inside]) / 1e9)
        windows.append(window)
    return windows, len(requests)
