"""The load generator against real servers on 127.0.0.1: a test OIP server with a known injected
latency distribution (a subprocess), the bench's own null endpoint, and an in-process ONNX model."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from harness.models import unary_onnx
from servelab.bench import InputSpec, LoadSpec, TargetSpec, measure_level, run_sweep
from servelab.bench.loadgen import OPEN_LOOP_SENDERS
from servelab.bench.nullserver import NullServer

FAKE = Path(__file__).with_name("bench_fake_oip_server.py")
FAST_S, SLOW_S = 0.020, 0.080  # 90% / 10% of requests
PRECISION = 0.01


def _upper_s(injected_s: float) -> float:
    """Scheduling slack: ms loop timers, HTTP, and other processes stalling us on a shared 2-core machine."""
    return injected_s * 1.25 + 0.005


class FakeServer:
    """bench_fake_oip_server.py as a subprocess; it prints ``PORT <n>`` once it is listening."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(FAKE), *args], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("PORT "), f"fake server did not start: {line!r}"
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"
        with urllib.request.urlopen(f"{self.url}/v2/health/ready", timeout=10) as resp:
            assert resp.status == 200

    def counters(self) -> dict[str, int]:
        with urllib.request.urlopen(f"{self.url}/counter", timeout=5) as resp:
            return {k: int(v) for k, v in json.load(resp).items()}

    def count(self) -> int:
        return self.counters()["count"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def mixture() -> Iterator[FakeServer]:
    server = FakeServer("--delays", f"{FAST_S}:0.9,{SLOW_S}:0.1")
    yield server
    server.stop()


def _target(server: FakeServer) -> TargetSpec:
    return TargetSpec("oip-http", server.url, server_pid=server.proc.pid)


def test_closed_loop_sends_exactly_the_requests_asked(mixture: FakeServer) -> None:
    before = mixture.count()
    load = LoadSpec(levels=(4,), request_count=120, warmup_requests=6, measurement_interval_ms=300)
    result = run_sweep(_target(mixture), "m", load, InputSpec(batch_size=2), measure_ceiling=False).levels[0]
    assert mixture.count() - before == 126
    assert result.sent == 120 and result.summary.completed == 120 and not result.errors
    assert result.summary.inferences_per_s == pytest.approx(2 * result.throughput_rps)
    assert result.server_rss_mb is not None and result.server_rss_mb > 1


def test_open_loop_sends_exactly_the_requests_asked_at_the_rate(mixture: FakeServer) -> None:
    before = mixture.count()
    load = LoadSpec(
        mode="request_rate", levels=(200,), request_count=150, warmup_requests=0, measurement_interval_ms=250
    )
    result = run_sweep(_target(mixture), "m", load, InputSpec(), measure_ceiling=False).levels[0]
    assert mixture.count() - before == 150
    assert result.summary.completed == 150
    assert result.throughput_rps == pytest.approx(200, rel=0.15)


def test_multi_process_workers_split_the_request_count(mixture: FakeServer) -> None:
    before = mixture.count()
    load = LoadSpec(levels=(4,), request_count=101, warmup_requests=4, workers=2, measurement_interval_ms=300)
    result = run_sweep(_target(mixture), "m", load, InputSpec(), measure_ceiling=False).levels[0]
    assert mixture.count() - before == 105
    assert result.workers == 2 and result.summary.completed == 101 and not result.failures


@pytest.mark.parametrize("mode", ["concurrency", "request_rate"])
def test_percentiles_match_the_injected_distribution(mixture: FakeServer, mode: str) -> None:
    level = 8 if mode == "concurrency" else 300
    load = LoadSpec(
        mode=mode,
        levels=(level,),
        arrivals="poisson",
        measurement_interval_ms=400,
        max_windows=4,
        stability_percentage=100,
    )  # type: ignore[arg-type]
    result = run_sweep(_target(mixture), "m", load, InputSpec(), measure_ceiling=False).levels[0]
    lat = result.summary.percentiles_ms()
    assert FAST_S * (1 - PRECISION) * 1e3 <= lat["p50"] <= _upper_s(FAST_S) * 1e3, lat
    assert SLOW_S * (1 - PRECISION) * 1e3 <= lat["p99"] <= _upper_s(SLOW_S) * 1e3, lat
    # the statistics extension reports the injected sleeps as queue time: mean 0.9*20 + 0.1*80 = 26 ms
    assert result.server is not None
    assert result.server["queue_us"] == pytest.approx(26_000, rel=0.15)


def test_stability_rule_stops_when_windows_agree(mixture: FakeServer) -> None:
    load = LoadSpec(levels=(16,), measurement_interval_ms=500, max_windows=10, stability_percentage=30)
    result = run_sweep(_target(mixture), "m", load, InputSpec(), measure_ceiling=False).levels[0]
    assert result.stable
    assert 3 <= len(result.windows) < 10


def test_stability_rule_runs_to_max_windows_when_latency_drifts() -> None:
    server = FakeServer("--delays", "0.004:1", "--drift-per-s", "3")
    try:
        load = LoadSpec(levels=(2,), measurement_interval_ms=250, max_windows=5, stability_percentage=10)
        result = run_sweep(_target(server), "m", load, InputSpec(), measure_ceiling=False).levels[0]
    finally:
        server.stop()
    assert not result.stable
    assert len(result.windows) == 5
    p50s = [w.histogram.percentile(50) for w in result.windows]
    assert p50s[-1] > 1.3 * p50s[-3]


def test_client_limited_against_null_server_but_not_against_a_slow_one(mixture: FakeServer) -> None:
    load = LoadSpec(levels=(8,), measurement_interval_ms=200, max_windows=3, stability_percentage=100)
    slow = run_sweep(_target(mixture), "m", load, InputSpec()).levels[0]
    assert slow.ceiling_rps is not None and slow.client_limited is False
    with NullServer("http") as null:
        fast = run_sweep(TargetSpec("oip-http", null.url), "m", load, InputSpec(shapes={"x": (4,)})).levels[0]
    assert fast.client_limited is True
    assert fast.to_dict()["client_limited"] is True


def test_grpc_client_against_the_null_grpc_endpoint() -> None:
    import asyncio

    load = LoadSpec(levels=(4,), request_count=80, warmup_requests=0, measurement_interval_ms=200)
    requests = [{"INPUT0": np.ones((1, 4), dtype=np.float32)}]
    with NullServer("grpc") as null:
        result = asyncio.run(measure_level(TargetSpec("oip-grpc", null.url), "m", requests, load, 4))
    assert result.summary.completed == 80 and not result.errors


def test_inprocess_onnx_target(tmp_path: Path) -> None:
    path = unary_onnx(tmp_path / "relu.onnx", "Relu")
    load = LoadSpec(levels=(2,), request_count=60, warmup_requests=2, measurement_interval_ms=200)
    result = run_sweep(TargetSpec("inprocess", str(path)), "relu", load, InputSpec(batch_size=3)).levels[0]
    assert result.summary.completed == 60 and not result.errors
    assert result.client_limited is None  # no wire, no ceiling


def test_cli_writes_json_csv_and_html(mixture: FakeServer, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from servelab.cli import app

    out, table, page = tmp_path / "r.json", tmp_path / "r.csv", tmp_path / "r.html"
    args = [
        "bench", "m", "--url", mixture.url, "--concurrency", "2,4", "--request-count", "40", "--warmup-requests", "0",
        "--measurement-interval-ms", "200", "--no-ceiling", "--output", str(out), "--csv", str(table), "--html", str(page),
    ]  # fmt: skip
    before = mixture.count()
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert mixture.count() - before == 80
    doc = json.loads(out.read_text())
    levels = doc["sweeps"][0]["levels"]
    assert [lv["level"] for lv in levels] == [2, 4] and all(lv["completed"] == 40 for lv in levels)
    assert levels[0]["latency_ms"]["p50"] >= FAST_S * 1e3 * (1 - PRECISION)
    assert len(table.read_text().splitlines()) == 3
    assert page.read_text().count("data:image/png;base64,") == 2


def test_cli_bad_input_is_a_clear_error(mixture: FakeServer) -> None:
    from typer.testing import CliRunner

    from servelab.cli import app

    result = CliRunner().invoke(
        app, ["bench", "m", "--url", mixture.url, "--shape", "INPUT0:9,9", "--no-ceiling"]
    )
    assert result.exit_code == 2
    assert "does not fit the model's shape" in result.output


def test_open_loop_counts_queueing_from_the_scheduled_send_time(mixture: FakeServer) -> None:
    # 200/s offered, but at most 2 in flight against ~26 ms requests: capacity ~77/s, so a backlog
    # builds. Timed from the schedule, latency grows with the backlog (~8 ms per request); timed
    # from the actual send it would stay near the injected 20/80 ms.
    load = LoadSpec(
        mode="request_rate", levels=(200,), max_inflight=2, request_count=60, warmup_requests=0,
        measurement_interval_ms=200,
    )  # fmt: skip
    result = run_sweep(_target(mixture), "m", load, InputSpec(), measure_ceiling=False).levels[0]
    assert result.summary.completed == 60
    assert result.summary.histogram.percentile(50) > 0.1
    assert result.summary.histogram.percentile(99) > 0.3


def test_open_loop_past_capacity_queues_arrivals_for_a_fixed_set_of_senders() -> None:
    # ~4,000/s offered to 80 ms requests (~320 would be in flight), up to 2,048 allowed outstanding: the
    # backlog waits in the worker for one of OPEN_LOOP_SENDERS senders, each on its own connection (its wait
    # counted in latency), instead of a task (and a connection) per late arrival
    server = FakeServer("--delays", f"{SLOW_S}:1.0")
    try:
        load = LoadSpec(
            mode="request_rate", levels=(4000,), max_inflight=2048, request_count=800, warmup_requests=0,
            measurement_interval_ms=200,
        )  # fmt: skip
        result = run_sweep(_target(server), "m", load, InputSpec(), measure_ceiling=False).levels[0]
        seen = server.counters()
    finally:
        server.stop()
    assert result.summary.completed == 800 and not result.errors
    assert seen["peak_inflight"] <= OPEN_LOOP_SENDERS
    assert seen["connections"] <= OPEN_LOOP_SENDERS
    # the backlog was real and is in the figures: 800 requests on 64 connections at 80 ms take >= 1 s
    assert result.summary.histogram.percentile(99) > 0.5
