"""perf_analyzer's CSV report and profile export read into servelab's types, and the command line built
from a LoadSpec and an InputSpec (no process is started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.bench._perf_analyzer_report import parse_csv, server_split, windows_from_export
from servelab.bench.perf_analyzer import PerfAnalyzer, PerfAnalyzerOptions
from servelab.bench.specs import InputSpec, LoadSpec, TargetSpec
from servelab.errors import InvalidArgument

# written by perf_analyzer 2.40 -f against Triton's add_sub here (rows come in its own order)
CSV = """Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency
4,3961.06,2,243,538,10,139,72,1,878,1189,1294,4851
1,4732.7,2,83,8,8,57,47,1,196,258,300,351
"""


def test_csv_rows_are_read_by_header_and_sorted_by_level() -> None:
    rows = parse_csv(CSV)
    assert [r.level for r in rows] == [1.0, 4.0]
    one = rows[0]
    assert one.inferences_per_s == 4732.7 and (one.p50_us, one.p90_us, one.p95_us, one.p99_us) == (196, 258, 300, 351)
    assert (one.client_send_us, one.network_us, one.client_recv_us) == (2, 83, 1)
    assert server_split(rows[1]) == {
        "queue_us": 538, "compute_input_us": 10, "compute_infer_us": 139, "compute_output_us": 72,
    }  # fmt: skip


def test_a_request_rate_report_reads_too() -> None:
    text = "Request Rate,Inferences/Second,p50 latency,p90 latency,p95 latency,p99 latency\n200,198.2,620,1050,1200,2375\n"
    (row,) = parse_csv(text)
    assert row.level == 200 and row.p99_us == 2375 and row.server_queue_us == 0


@pytest.mark.parametrize(
    ("text", "match"),
    [("", "no rows"), ("Concurrency,p50 latency\n1,2\n", "lacks"), ("Inferences/Second,p50 latency,p99 latency\n1,2,3\n", "Concurrency")],
)
def test_a_file_that_is_not_a_report_is_named(text: str, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        parse_csv(text)


def _request(sent_ns: int, latency_ns: int) -> dict[str, object]:
    return {"timestamp": sent_ns, "response_timestamps": [sent_ns + latency_ns]}


def test_windows_hold_the_requests_sent_and_answered_inside_them() -> None:
    s = 1_000_000_000
    requests = [
        _request(100, 1_000_000),  # window 0, 1 ms
        _request(s - 500_000, 1_000_000),  # straddles windows 0 and 1: counted in neither
        _request(s + 10, 2_000_000),  # window 1, 2 ms
        _request(s + 20, 4_000_000),  # window 1, 4 ms
        _request(2 * s + 5, 3_000_000),  # after the last boundary: not measured
        {"timestamp": 50, "response_timestamps": []},  # never answered
    ]
    doc = {"experiments": [{"experiment": {"mode": "concurrency", "value": 2}, "requests": requests,
                            "window_boundaries": [0, s, 2 * s]}], "version": "2.40.0"}  # fmt: skip
    windows, sent = windows_from_export(doc, 2.0, batch_size=4)
    assert sent == 6
    assert [w.duration_s for w in windows] == [1.0, 1.0]
    assert [w.completed for w in windows] == [1, 2]
    assert windows[1].inferences_per_s == 8.0
    assert windows[1].histogram.percentile(100) == pytest.approx(4e-3, rel=0.02)
    assert windows[0].histogram.percentile(50) == pytest.approx(1e-3, rel=0.02)


def test_an_export_without_the_level_says_which_levels_it_has() -> None:
    doc = {"experiments": [{"experiment": {"value": 1}, "requests": [], "window_boundaries": []}]}
    with pytest.raises(InvalidArgument, match=r"level 4; it has \[1\]"):
        windows_from_export(doc, 4.0)


@pytest.fixture
def pa(tmp_path: Path) -> PerfAnalyzer:
    return PerfAnalyzer(tmp_path)


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_command_line_follows_the_load_and_the_inputs(pa: PerfAnalyzer) -> None:
    load = LoadSpec(measurement_interval_ms=750, stability_percentage=25, max_windows=7)
    inputs = InputSpec(batch_size=4, shapes={"INPUT": (3, 8)}, fill="zero")
    argv = pa.argv(TargetSpec("oip-grpc", "127.0.0.1:8001", model_version="2"), "mlp", load, inputs, 16.0)
    assert argv[0] == str(pa.binary) and _flag(argv, "-m") == "mlp" and _flag(argv, "-x") == "2"
    assert (_flag(argv, "-u"), _flag(argv, "-i")) == ("127.0.0.1:8001", "grpc")
    assert _flag(argv, "--concurrency-range") == "16" and _flag(argv, "--measurement-interval") == "750"
    assert (_flag(argv, "-s"), _flag(argv, "-r"), _flag(argv, "-b")) == ("25", "7", "4")
    assert _flag(argv, "--input-data") == "zero" and _flag(argv, "--shape") == "INPUT:3,8"
    assert "--percentile=99" in argv and "--input-tensor-format=json" not in argv


def test_http_json_request_rate_and_count_windows(pa: PerfAnalyzer, tmp_path: Path) -> None:
    load = LoadSpec(mode="request_rate", levels=(250.0,), arrivals="poisson", window_requests=500)
    target = TargetSpec("oip-http", "http://127.0.0.1:8000/", binary=False)
    argv = PerfAnalyzer(tmp_path, options=PerfAnalyzerOptions(percentile=None, async_mode=True)).argv(
        target, "m", load, InputSpec(data_path="data.json"), 250.0
    )
    assert _flag(argv, "-u") == "127.0.0.1:8000" and _flag(argv, "-i") == "http"
    assert _flag(argv, "--request-rate-range") == "250" and _flag(argv, "--request-distribution") == "poisson"
    assert _flag(argv, "--measurement-mode") == "count_windows" and _flag(argv, "--measurement-request-count") == "500"
    assert "--measurement-interval" not in argv and not any(a.startswith("--percentile") for a in argv)
    assert "--input-tensor-format=json" in argv and "--async" in argv and _flag(argv, "--input-data") == "data.json"


@pytest.mark.parametrize(
    ("target", "load", "inputs", "match"),
    [
        (TargetSpec("inprocess", "m.onnx"), LoadSpec(), InputSpec(), "OIP servers"),
        (TargetSpec("oip-http", "https://h:1"), LoadSpec(), InputSpec(), "https"),
        (TargetSpec("oip-http", "http://h:1"), LoadSpec(request_count=10), InputSpec(), "request count"),
        (TargetSpec("oip-http", "http://h:1"), LoadSpec(), InputSpec(data_path="x.npz"), "JSON input"),
    ],
)
def test_what_perf_analyzer_cannot_do_is_refused_with_the_reason(
    pa: PerfAnalyzer, target: TargetSpec, load: LoadSpec, inputs: InputSpec, match: str
) -> None:
    with pytest.raises(InvalidArgument, match=match):
        pa.argv(target, "m", load, inputs, 1.0)


def test_the_percentile_is_checked() -> None:
    with pytest.raises(InvalidArgument, match="percentile"):
        PerfAnalyzerOptions(percentile=100)


def test_the_libraries_are_found_through_ld_library_path(pa: PerfAnalyzer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/x")
    paths = pa.env()["LD_LIBRARY_PATH"].split(":")
    assert paths[-1] == "/opt/x" and paths[0].endswith("libb64/usr/lib/x86_64-linux-gnu")
    assert paths[1].endswith("nvidia/cuda_runtime/lib")
