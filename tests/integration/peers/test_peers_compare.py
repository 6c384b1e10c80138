"""``servelab compare`` over a tiny repository: in-process ORT against the FastAPI + ORT peer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from harness.repository import tiny_repository
from servelab.bench.compare import CompareSpec, run_compare
from servelab.bench.peers.compare_report import write_html
from servelab.bench.peers.family import find_family
from servelab.bench.peers.targets import parse_targets
from servelab.bench.results_md import read_section
from servelab.cli import compare as compare_cli
from servelab.errors import InvalidArgument, NotFound


def test_compare_in_process_and_fastapi(tmp_path: Path) -> None:
    repo = tiny_repository(tmp_path / "repo")
    spec = CompareSpec(
        model="tiny", repository=repo, targets=tuple(parse_targets("inprocess-ort,fastapi-ort")),
        batch_sizes=(1, 8), concurrency=2, baseline="inprocess-ort", measurement_interval_ms=200, max_windows=3,
        warmup_requests=5, max_level_s=10.0,
    )  # fmt: skip
    messages: list[str] = []
    result = run_compare(spec, messages.append)
    rows = result.rows()
    assert [(r.target, r.batch_size) for r in rows] == [
        ("inprocess-ort", 1), ("inprocess-ort", 8), ("fastapi-ort", 1), ("fastapi-ort", 8),
    ]  # fmt: skip
    for r in rows:
        assert r.requests_per_s > 0 and r.errors == 0 and 0 < r.p50_ms <= r.p99_ms
        assert r.inferences_per_s == pytest.approx(r.requests_per_s * r.batch_size)
    assert rows[0].throughput_ratio == pytest.approx(1.0) and rows[0].p50_ratio == pytest.approx(1.0)
    assert rows[2].server_rss_mb is not None and rows[2].server_rss_mb > 10
    assert rows[0].server_rss_mb is None
    assert any("fastapi-ort: ready" in m for m in messages)

    result.write_json(tmp_path / "out" / "compare.json")
    doc = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert (
        doc["model"] == "tiny"
        and len(doc["rows"]) == 4
        and doc["targets"][1]["description"]["payload"] == "JSON"
    )
    write_html(result, tmp_path / "out" / "compare.html")
    page = (tmp_path / "out" / "compare.html").read_text()
    assert "fastapi-ort" in page and "<table>" in page


def test_a_target_that_cannot_run_is_reported_not_fatal(tmp_path: Path) -> None:
    repo = tiny_repository(
        tmp_path / "repo"
    )  # no TorchScript model: servelab-torch has nothing to serve
    spec = CompareSpec(model="tiny_onnx", repository=repo, targets=tuple(parse_targets("servelab-torch")))
    result = run_compare(spec)
    assert result.rows() == []
    assert result.outcomes[0].error is not None and "no torch model of 'tiny'" in result.outcomes[0].error


def test_parse_targets() -> None:
    parsed = parse_targets("servelab-onnxruntime@grpc, mlserver,inprocess-ort,oip=grpc://127.0.0.1:9")
    assert [(c.name, c.protocol) for c in parsed] == [
        ("servelab-onnxruntime", "grpc"), ("mlserver", "http"), ("inprocess-ort", "http"), ("oip", "grpc"),
    ]  # fmt: skip
    assert parse_targets("mlserver", default_protocol="grpc")[0].protocol == "grpc"
    for bad, match in [("tritonserver", "unknown target"), ("fastapi-ort@grpc", "applies only"), ("oip=ftp://x", "oip=http"),
                       ("inprocess-ort,inprocess-ort", "twice"), ("", "empty")]:  # fmt: skip
        with pytest.raises(InvalidArgument, match=match):
            parse_targets(bad)


def test_family_lookup(tmp_path: Path) -> None:
    repo = tiny_repository(tmp_path / "repo")
    fam = find_family(repo, "tiny_onnx")
    assert fam.base == "tiny" and set(fam.members) == {"onnxruntime"}
    arts = fam.artefacts("onnxruntime")
    assert arts.onnx is not None and arts.onnx.name == "model.onnx" and arts.inputs[0].dims == (4,)
    with pytest.raises(NotFound, match="models there"):
        find_family(repo, "absent")


def test_cli_rejects_a_baseline_outside_the_targets(tmp_path: Path) -> None:
    app = typer.Typer()
    compare_cli.register(app)
    app.command("noop")(lambda: None)  # keep "compare" a sub-command
    repo = tiny_repository(tmp_path / "repo")
    out = CliRunner().invoke(
        app, ["compare", "tiny", "--repo", str(repo), "--targets", "inprocess-ort", "--baseline", "mlserver"]
    )
    assert out.exit_code == 2 and "not one of --targets" in out.output


def test_cli_rounds_alternate_on_servers_started_once(tmp_path: Path) -> None:
    """`servelab compare --rounds 2`: every target measured in both rounds, the second in reverse order,
    the server started once; the JSON keeps both rounds and the RESULTS.md section renders from it."""
    app = typer.Typer()
    compare_cli.register(app)
    app.command("noop")(lambda: None)  # keep "compare" a sub-command
    repo = tiny_repository(tmp_path / "repo")
    results_md = tmp_path / "RESULTS.md"
    results_md.write_text("# results\n\n<!-- BEGIN compare -->\nNot measured yet.\n<!-- END compare -->\n")
    args = [
        "compare", "tiny", "--repo", str(repo), "--targets", "inprocess-ort,servelab-onnxruntime", "--rounds", "2",
        "--batch-sizes", "1,4", "--concurrency", "2", "--measurement-interval-ms", "200", "--max-windows", "3",
        "--output", str(tmp_path / "compare.json"), "--html", str(tmp_path / "compare.html"),
        "--results-md", str(results_md),
    ]  # fmt: skip
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    assert out.output.count("servelab-onnxruntime: starting") == 1, out.output

    doc = json.loads((tmp_path / "compare.json").read_text())
    assert doc["settings"]["rounds"] == 2
    first = [["inprocess-ort", 1], ["inprocess-ort", 4], ["servelab-onnxruntime", 1], ["servelab-onnxruntime", 4]]
    assert doc["order"] == [first, first[::-1]]
    for target in doc["targets"]:
        assert target["error"] is None and len(target["rounds"]) == 2
        for rnd in target["rounds"]:
            assert sorted(rnd) == ["1", "4"] and all(lv["throughput_rps"] > 0 for lv in rnd.values())
    for row in doc["rows"]:
        assert row["rounds"] == 2 and len(row["inferences_per_s_rounds"]) == 2
        assert row["inferences_per_s_min"] <= row["inferences_per_s"] <= row["inferences_per_s_max"]
        assert row["inferences_per_s"] in row["inferences_per_s_rounds"]  # a real round, not an average
        ratios = row["throughput_ratio_rounds"]
        assert len(ratios) == 2 and row["throughput_ratio"] == pytest.approx(sum(ratios) / 2)
    base = [r for r in doc["rows"] if r["target"] == "inprocess-ort"]
    assert all(r["throughput_ratio"] == pytest.approx(1.0) for r in base)

    section = read_section(results_md, "compare")
    assert section is not None and section == compare_cli.results_markdown(doc).strip("\n") + "\n"
    assert "2 rounds" in section and "reversed on every other round" in section and "inf/s min-max" in section
    assert section.count("| servelab-onnxruntime |") == 2
    assert "2 rounds: each measured every target" in (tmp_path / "compare.html").read_text()
