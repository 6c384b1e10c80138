"""Alternating rounds in ``servelab compare``: the order, the median round, the per-round ratio, from plain
figures (levels built from known windows; nothing is measured)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from servelab.bench.compare import CompareResult, CompareSpec, TargetOutcome
from servelab.bench.peers.compare_report import COLUMNS, ONE_ROUND_COLUMNS, SPREAD, row_cells
from servelab.bench.peers.targets import parse_targets
from servelab.bench.results import LevelResult
from servelab.bench.rounds import median_or_none, median_round, per_round_ratios, round_order
from servelab.bench.stats import WindowStats
from servelab.cli.compare import results_markdown
from servelab.errors import InvalidArgument


def test_round_order_alternates() -> None:
    cells = [("a", 1), ("a", 8), ("b", 1), ("b", 8)]
    assert round_order(cells, 0) == cells
    assert round_order(cells, 1) == [("b", 8), ("b", 1), ("a", 8), ("a", 1)]
    assert round_order(cells, 2) == cells and round_order(cells, 3) == round_order(cells, 1)
    with pytest.raises(ValueError, match="round_index must be >= 0"):
        round_order(cells, -1)


def test_spec_order_is_target_major_and_reversed_on_odd_rounds() -> None:
    spec = CompareSpec(
        model="m", repository=Path("r"), targets=tuple(parse_targets("inprocess-ort,fastapi-ort")), batch_sizes=(1, 8),
        rounds=3,
    )  # fmt: skip
    first = [("inprocess-ort", 1), ("inprocess-ort", 8), ("fastapi-ort", 1), ("fastapi-ort", 8)]
    assert spec.order(0) == first and spec.order(1) == first[::-1] and spec.order(2) == first
    with pytest.raises(InvalidArgument, match="--rounds must be a whole number >= 1, got 0"):
        CompareSpec(model="m", repository=Path("r"), targets=spec.targets, rounds=0)


def test_median_round_picks_a_real_round() -> None:
    assert median_round([30.0, 10.0, 20.0]) == 2  # 20 is the middle value, measured in round 2
    assert median_round([10.0, 30.0]) == 1  # even count: the upper middle one
    assert median_round([None, 5.0, math.nan, 7.0, 6.0]) == 4  # rounds without a figure are left out
    assert median_round([None, math.nan]) is None and median_round([]) is None


def test_per_round_ratios_pair_each_round_with_its_own_baseline() -> None:
    assert per_round_ratios([10.0, 20.0, 9.0], [20.0, 40.0, 10.0]) == [0.5, 0.5, 0.9]
    assert per_round_ratios([1.0, None, 3.0, 4.0], [0.0, 2.0, math.nan, 2.0]) == [None, None, None, 2.0]
    with pytest.raises(ValueError, match="3 rounds of values but 2 rounds of baseline"):
        per_round_ratios([1.0, 2.0, 3.0], [1.0, 2.0])
    assert median_or_none([0.5, None, 0.9, 0.6]) == 0.6 and median_or_none([0.5, 0.7]) == pytest.approx(0.6)
    assert median_or_none([None, math.nan]) is None


def _level(requests_per_s: float, latency_ms: float, batch: int = 1) -> LevelResult:
    """A level whose one window completed ``requests_per_s`` requests in a second, each ``latency_ms`` long."""
    window = WindowStats(1.0, batch_size=batch)
    for _ in range(int(requests_per_s)):
        window.histogram.record(latency_ms / 1e3)
    return LevelResult(mode="concurrency", level=2.0, workers=1, batch_size=batch, windows=[window],
                       summary=window, stable=True, sent=int(requests_per_s))  # fmt: skip


def _result(rounds: list[tuple[float, float]]) -> CompareResult:
    """Baseline ``base`` and target ``fastapi-ort`` at batch 1, (baseline req/s, target req/s) per round."""
    spec = CompareSpec(
        model="m", repository=Path("r"), targets=tuple(parse_targets("inprocess-ort,fastapi-ort")), batch_sizes=(1,),
        baseline="inprocess-ort", rounds=len(rounds),
    )  # fmt: skip
    base = TargetOutcome(
        "inprocess-ort", {"protocol": "in-process"}, [{1: _level(b, 1.0)} for b, _ in rounds]
    )
    # the target's latency differs per round, so the chosen round shows in its P50
    target = TargetOutcome(
        "fastapi-ort", {"protocol": "http"}, [{1: _level(t, 2.0 + i)} for i, (_, t) in enumerate(rounds)]
    )
    return CompareResult(spec, [base, target], [spec.order(r) for r in range(len(rounds))])


def test_rows_show_the_median_round_the_spread_and_the_median_per_round_ratio() -> None:
    # the machine slows down in round 1 and the target's ratio stays near 0.5; in round 2 the baseline
    # alone has a bad round (ratio 0.76): the per-round median is 0.55, not the ratio of the medians
    result = _result([(400.0, 200.0), (200.0, 110.0), (250.0, 190.0)])
    base_row, row = result.rows()
    assert row.target == "fastapi-ort" and row.rounds == 3
    assert row.median_round == 2 and row.requests_per_s == pytest.approx(190.0)  # the middle of 200, 110, 190
    assert row.p50_ms == pytest.approx(4.0, rel=0.03)  # the latency of round 2, the one shown
    assert (row.inferences_per_s_min, row.inferences_per_s_max) == (
        pytest.approx(110.0),
        pytest.approx(200.0),
    )
    assert list(row.throughput_ratio_rounds) == pytest.approx([0.5, 0.55, 0.76])
    assert row.throughput_ratio == pytest.approx(
        0.55
    )  # median of 0.5, 0.55, 0.76; the medians' ratio is 0.76
    assert row.p50_ratio == pytest.approx(3.0, rel=0.03)  # P50 2, 3, 4 ms against 1 ms: median 3
    assert base_row.throughput_ratio == pytest.approx(1.0) and base_row.median_round == 2
    assert result.outcomes[1].levels[1] is result.outcomes[1].rounds[2][1]


def test_a_target_that_stopped_keeps_the_rounds_it_measured() -> None:
    result = _result([(400.0, 200.0), (200.0, 110.0)])
    result.outcomes[1].rounds.append({})  # stopped in round 2 (its error says so)
    result.outcomes[1].error = "round 3, batch 1: connection refused"
    row = result.rows()[1]
    assert row.rounds == 2 and row.median_round == 0 and row.throughput_ratio == pytest.approx(0.525)


def test_json_keeps_every_round_and_renders_its_section() -> None:
    result = _result([(400.0, 200.0), (200.0, 120.0)])
    doc = json.loads(json.dumps(result.to_dict(), default=str))
    assert doc["settings"]["rounds"] == 2 and doc["order"][1] == [["fastapi-ort", 1], ["inprocess-ort", 1]]
    target = doc["targets"][1]
    assert [r["1"]["throughput_rps"] for r in target["rounds"]] == pytest.approx([200.0, 120.0])
    assert target["levels"]["1"]["throughput_rps"] == pytest.approx(200.0)  # the median round, as before
    section = results_markdown(doc)
    assert "2 rounds" in section and "reversed on every other round" in section
    header = next(line for line in section.splitlines() if line.startswith("| target"))
    assert [c.strip() for c in header.strip("|").split("|")] == list(COLUMNS)
    line = next(line for line in section.splitlines() if line.startswith("| fastapi-ort"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[COLUMNS.index(SPREAD)] == "120-200" and cells[COLUMNS.index("x thr")] == "0.55"


def test_a_document_from_before_rounds_renders_as_it_did() -> None:
    doc = json.loads(json.dumps(_result([(400.0, 200.0)]).to_dict(), default=str))
    del doc["settings"]["rounds"], doc["order"]
    for r in doc["rows"]:  # the keys a row had then
        for key in ("rounds", "median_round", "inferences_per_s_min", "inferences_per_s_max",
                    "inferences_per_s_rounds", "throughput_ratio_rounds"):  # fmt: skip
            del r[key]
    section = results_markdown(doc)
    assert "rounds" not in section and SPREAD not in section
    assert f"| {' | '.join(ONE_ROUND_COLUMNS)} |" in section
    row = _result([(2.0, 1.0)]).rows()[1]
    assert row_cells(row, ONE_ROUND_COLUMNS) == [
        c for c, name in zip(row_cells(row), COLUMNS, strict=True) if name != SPREAD
    ]
    assert row_cells(row)[COLUMNS.index(SPREAD)] == "1-1"
