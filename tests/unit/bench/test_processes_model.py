"""benchmarks/processes_model.py: the random spread of connections over processes, and the inputs it reads."""

from __future__ import annotations

import random
from typing import Any

import pytest

from harness.bench_scripts import import_benchmark


@pytest.fixture(scope="module")
def model():  # type: ignore[no-untyped-def]
    return import_benchmark("processes_model")


CURVE = [[0.0, 0.0], [1.0, 0.5], [4.0, 1.0]]
SATURATED_BY_ONE = [[0.0, 0.0], [1.0, 1.0]]


def test_the_share_is_the_measured_curve_between_its_points(model) -> None:  # type: ignore[no-untyped-def]
    assert [model.share(CURVE, c) for c in (0, 1, 2.5, 4, 16)] == pytest.approx([0, 0.5, 0.75, 1.0, 1.0])


def test_one_process_is_as_busy_as_its_connections_make_it(model) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(0)
    assert model.busy(1, 1, CURVE, 1, 10, rng) == pytest.approx(0.5)
    assert model.busy(1, 2, CURVE, 1, 10, rng) == pytest.approx(2 / 3)
    assert model.busy(1, 1, CURVE, 4, 10, rng) == pytest.approx(1.0)  # one gRPC connection of 4 calls


def test_one_connection_per_process_leaves_about_a_third_idle(model) -> None:  # type: ignore[no-untyped-def]
    # K = N connections at random: the expected share of processes with none is (1 - 1/N)^N -> 1/e
    got = model.busy(64, 64, SATURATED_BY_ONE, 1, 300, random.Random(1)) / 64
    assert got == pytest.approx(1 - (63 / 64) ** 64, abs=0.02)
    assert model.busy(8, 8 * 16, SATURATED_BY_ONE, 1, 100, random.Random(2)) == pytest.approx(8.0, abs=0.01)


def _row(mode: str, protocol: str, c: int, rate: float) -> dict[str, Any]:
    return {"model": "add_sub", "mode": mode, "protocol": protocol, "concurrency": c,
            "servelab": {"inferences_per_s": rate}}


def test_the_inputs_come_from_the_inline_cells(model) -> None:  # type: ignore[no-untyped-def]
    rows = [_row("inline", "http", 1, 3000), _row("inline", "http", 4, 5900), _row("inline", "http", 16, 6200),
            _row("inline2", "http", 16, 9300), _row("inline", "grpc", 1, 1800), _row("inline", "grpc", 4, 3400),
            _row("inline", "grpc", 16, 3500), _row("inline2", "grpc", 16, 3900)]
    runs = [{"server": "servelab-inline", "server_rss_mb": 120.0}]
    got = model.measured({"rows": rows, "runs": runs})
    assert got["http"]["mu"] == 6200 and got["http"]["two"] == pytest.approx(1.5)
    assert [c for c, _ in got["http"]["curve"]] == [0, 1, 4, 16]
    assert [s for _, s in got["http"]["curve"]] == pytest.approx([0, 3000 / 6200, 5900 / 6200, 1.0])
    assert got["grpc"]["mu"] == 3500 and got["grpc"]["rss_mb"] == 120.0
    with pytest.raises(ValueError, match="run vs_triton.py first"):
        model.measured({"rows": [], "runs": []})
