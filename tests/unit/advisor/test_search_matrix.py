"""The quick search's climb, its budget, the rate bisection and the decision matrix, on a landscape whose
best point is known (no servers: the measured rates come from a formula)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest

from servelab.advisor.grid import ArtefactRef, Batching, Candidate, Grid, parse_batching
from servelab.advisor.inprocess import InProcessResult, choose_batch, prune
from servelab.advisor.matrix import Constraints, Row, decide, load_qualitative, parse_weights
from servelab.advisor.search import Measured, StartHints, batching_gain, quick_search, start_point
from servelab.advisor.wire import (
    MIN_WINDOW_REQUESTS,
    MeasureSettings,
    Probe,
    RateSearch,
    marginal,
    search_rate,
)
from servelab.errors import InvalidArgument

ORT = ArtefactRef("m_onnx_fp32", "onnxruntime", "fp32", 32)
OV = ArtefactRef("m_openvino_fp32", "openvino", "fp32", 32)


def _rate(c: Candidate) -> float:
    """A smooth landscape: batching helps, a second instance helps ORT, gRPC costs 10%; best: ORT b32 x2 t1 rest."""
    base = 1000.0 if c.artefact is ORT else 700.0
    base *= {0: 1.0, 8: 1.6, 32: 2.0}[c.batching.max_batch_size]
    base *= 1.3 if c.instances == 2 and c.artefact is ORT else 1.0
    base *= 1.1 if c.threads == 1 else 1.0
    return base * (0.9 if c.front_door == "grpc" else 1.0)


def _against(rate: float, incumbent: float | None) -> RateSearch:
    """A search of a point whose rate is ``rate``: cut short unless it beats ``incumbent`` by 3%."""
    complete = incumbent is None or rate > incumbent * 1.03
    return RateSearch(best_rate=rate if complete else 0.0, complete=complete)


@dataclass
class Landscape:
    results: dict[Candidate, Measured] = field(default_factory=dict)

    @property
    def seconds_per_search(self) -> float | None:
        return None  # no clock: no time kept for confirming

    def measure(self, c: Candidate, incumbent: float | None = None) -> Measured:
        m = Measured(c, _against(_rate(c), incumbent), len(self.results))
        self.results[c] = m
        return m

    def remeasure(self, c: Candidate, incumbent: float | None = None) -> RateSearch:
        return _against(_rate(c), incumbent)

    def close(self) -> None:
        pass


@dataclass
class NoisyLandscape(Landscape):
    """Each search of a point reads the next of its figures (cycling); ``searched`` records the order."""

    figures: dict[Candidate, list[float]] = field(default_factory=dict)
    searched: list[Candidate] = field(default_factory=list)

    def _next(self, c: Candidate) -> float:
        seq = self.figures.get(c, [_rate(c)])
        rate = seq[sum(1 for s in self.searched if s == c) % len(seq)]
        self.searched.append(c)
        return rate

    def measure(self, c: Candidate, incumbent: float | None = None) -> Measured:
        rate = self._next(c)
        complete = incumbent is None or rate > incumbent * 1.03
        probe = Probe("request_rate", (incumbent or rate) * 1.03, rate, 1.0, 99.0, 0, None, complete)
        search = RateSearch([probe], best_rate=rate if complete else 0.0, complete=complete)
        m = Measured(c, search, len(self.results), searches=[search])
        self.results[c] = m
        return m

    def remeasure(self, c: Candidate, incumbent: float | None = None) -> RateSearch:
        return _against(self._next(c), incumbent)


def _grid() -> Grid:
    return Grid((ORT, OV), parse_batching("off,8:200,32:1000"), (1, 2), (1, 2), ("rest", "grpc"))


def test_quick_search_finds_the_best_within_the_budget() -> None:
    grid = _grid()
    assert grid.size == 48
    best = max(grid.points(), key=_rate)
    land = Landscape()
    pick, log = quick_search(grid, [ORT, OV], land, budget=12)  # type: ignore[arg-type]
    assert pick == best, log
    assert len(land.results) <= 12
    assert log[0].startswith("start onnxruntime/fp32 b32/1000us x1 t2 rest")


def test_batching_is_the_start_only_where_the_in_process_run_says_it_pays() -> None:
    # the credit trees: 0.03 ms a row, 130,000 rows/s in a batch -> the wire dominates, no batcher
    cheap = batching_gain(0.03, 130_000)
    assert 1.0 < cheap < 1.5
    # a model whose call is the cost: 5 ms a row, 2,000 rows/s at batch 32
    heavy = batching_gain(5.0, 2_000)
    assert heavy > 5
    grid = _grid()
    assert not start_point(grid, ORT, StartHints(cheap)).batching.on
    assert start_point(grid, ORT, StartHints(heavy)).batching == Batching(32, 1000)
    assert start_point(grid, ORT).batching == Batching(32, 1000)  # no in-process figure: on
    assert start_point(grid, ORT).threads == 2
    assert start_point(grid, ORT, StartHints(heavy, threads_gain=1.1)).threads == 1  # a second thread does not pay
    assert start_point(grid, ORT, StartHints(heavy, threads_gain=1.8)).threads == 2
    # with the load's concurrency known: the largest max batch it can fill (32 never fills from 16 in flight)
    assert start_point(grid, ORT, StartHints(heavy), concurrency=16).batching == Batching(8, 200)
    assert start_point(grid, ORT, StartHints(heavy), concurrency=64).batching == Batching(32, 1000)
    assert start_point(grid, ORT, StartHints(heavy), concurrency=4).batching == Batching(32, 1000)  # none fills
    assert not start_point(grid, ORT, StartHints(cheap), concurrency=16).batching.on
    assert batching_gain(float("nan"), 0.0) == 1.0


def test_the_climb_starts_unbatched_where_batching_does_not_pay() -> None:
    land = Landscape()
    pick, log = quick_search(_grid(), [ORT, OV], land, budget=12, hints=StartHints(1.1, 1.05))  # type: ignore[arg-type]
    assert log[0].startswith("start onnxruntime/fp32 off x1 t1 rest (in process: batching gain 1.10x, threads gain 1.05x)")
    assert pick is not None and pick.batching.on  # the landscape rewards batching: the climb still finds it


def test_the_same_cores_split_the_other_way_is_one_step() -> None:
    grid = _grid()
    c = Candidate(ORT, Batching(), 1, 2, "rest")
    assert Candidate(ORT, Batching(), 2, 1, "rest") in grid.neighbours(c)
    assert Candidate(ORT, Batching(), 1, 2, "rest") in grid.neighbours(Candidate(ORT, Batching(), 2, 1, "rest"))
    assert Candidate(ORT, Batching(), 2, 2, "rest") in grid.neighbours(c)  # one more instance, as before
    assert all(grid.contains(n) for n in grid.neighbours(c))


def test_the_pick_is_confirmed_against_near_rivals_by_the_median_of_alternating_searches() -> None:
    """The climb stops on a lucky first figure (ORT off x1 t1: 1,300 once, 1,000 after); a rival that lost the
    climb narrowly (OV off x1 t1, ~1,150 every time) wins on medians; a far-off point is not searched again."""
    grid = Grid((ORT, OV), (Batching(),), (1,), (1, 2), ("rest",))
    lucky, steady, far = (Candidate(ORT, Batching(), 1, 1, "rest"), Candidate(OV, Batching(), 1, 1, "rest"),
                          Candidate(ORT, Batching(), 1, 2, "rest"))  # fmt: skip
    land = NoisyLandscape(figures={lucky: [1300.0, 1000.0, 990.0], steady: [1150.0, 1160.0, 1140.0], far: [500.0]})
    pick, log = quick_search(grid, [ORT, OV], land, budget=4, hints=StartHints(1.1, 1.0))  # type: ignore[arg-type]
    assert log[0].startswith("start onnxruntime/fp32 off x1 t1 rest")
    assert pick == steady, log
    confirmed = next(line for line in log if line.startswith("confirmed"))
    assert "pick openvino/fp32 off x1 t1 rest" in confirmed
    assert land.results[lucky].max_rate == 1000.0 and len(land.results[lucky].searches) == 3
    assert land.results[steady].max_rate == 1140.0  # the cut-short first search left out: lower of two
    # 500 < 80% of 1,300: no rival; cut short against 1,300, it is searched once more against the median 1,140
    assert land.searched.count(far) == 2 and log[-2:] == [
        "1 point(s) cut short against up to 1,300 req/s, above the confirmed 1,140: searched again against it",
        "none beats 1,140 req/s: stop"]
    assert len(land.results) == 3  # confirming measures no new grid point
    # alternating order: the first round from the last rival, the second from the incumbent
    assert land.searched[-5:-1] == [steady, lucky, lucky, steady]
    # with no rounds the climb's figures stand
    again = NoisyLandscape(figures=land.figures)
    assert quick_search(grid, [ORT, OV], again, budget=4, hints=StartHints(1.1, 1.0), confirm_rounds=0)[0] == lucky  # type: ignore[arg-type]


def test_a_point_searched_once_does_not_outrank_a_confirmed_median() -> None:
    """The start (ORT off, ~1,500 every time) is left for a lucky neighbour (ORT b8: 3,000 once, 1,000 after)
    too far above it to be a rival; once the neighbour's median is 1,000 the start's one figure tops it, so the
    start is confirmed against it and wins (before, the unconfirmed figure and the pick disagreed)."""
    grid = Grid((ORT,), (Batching(), Batching(8, 200)), (1,), (1,), ("rest",))
    steady, lucky = Candidate(ORT, Batching(), 1, 1, "rest"), Candidate(ORT, Batching(8, 200), 1, 1, "rest")
    land = NoisyLandscape(figures={steady: [1500.0, 1490.0, 1510.0], lucky: [3000.0, 1000.0, 1000.0, 1000.0]})
    pick, log = quick_search(grid, [ORT], land, budget=2, hints=StartHints(1.1, 1.0))  # type: ignore[arg-type]
    assert log[1] == "move to onnxruntime/fp32 b8/200us x1 t1 rest: 3,000 req/s", log
    assert pick == steady, log
    assert land.results[lucky].max_rate == 1000.0 and land.results[steady].max_rate == 1500.0
    assert len(land.results[steady].searches) == 3  # the climb's search and two confirming ones
    assert "pick onnxruntime/fp32 off x1 t1 rest" in log[-1]


def test_neighbours_cut_short_against_a_lucky_incumbent_are_searched_again_against_its_median() -> None:
    """The start (ORT b8: 3,000 once, 1,000 after) cuts its neighbour (ORT off, 1,500 every time) short; once
    the start's median is 1,000 the neighbour is searched again against that, beats it, and is the pick."""
    grid = Grid((ORT,), (Batching(), Batching(8, 200)), (1,), (1,), ("rest",))
    lucky, steady = Candidate(ORT, Batching(8, 200), 1, 1, "rest"), Candidate(ORT, Batching(), 1, 1, "rest")
    land = NoisyLandscape(figures={lucky: [3000.0, 1000.0, 1000.0, 1000.0], steady: [1500.0]})
    pick, log = quick_search(grid, [ORT], land, budget=2)  # type: ignore[arg-type]
    assert log[0].startswith("start onnxruntime/fp32 b8/200us x1 t1 rest: 3,000"), log
    assert not land.results[steady].searches[0].complete  # cut short against 3,000
    assert any(line.startswith("1 point(s) cut short against up to 3,000 req/s, above the confirmed 1,000") for line in log), log
    assert pick == steady, log
    assert land.results[steady].max_rate == 1500.0 and land.results[lucky].max_rate == 1000.0
    assert len(land.results) == 2  # searching again measures no new grid point
    # a deterministic landscape has nothing to search again: the climb's pick stands
    plain = Landscape()
    best = max(_grid().points(), key=_rate)
    assert quick_search(_grid(), [ORT, OV], plain, budget=12)[0] == best  # type: ignore[arg-type]


def test_prune_keeps_the_fastest_and_the_lowest_latency_and_says_why_the_rest_went() -> None:
    """The text encoder's in-process figures (2026-12-03): ONNX Runtime INT8 was fourth at batch 32 but had the
    lowest one-row latency, and served (small batches) it was the best; it is kept beside the three fastest."""
    def art(name: str) -> ArtefactRef:
        backend, precision = name.split("/")
        return ArtefactRef(f"text_{backend}_{precision}", backend, precision, 32)

    figures = {"onnxruntime/fp32": (0.240, 8273), "onnxruntime/fp16": (0.271, 6905), "onnxruntime/int8": (0.225, 8173),
               "openvino/fp32": (0.249, 10476), "pytorch/fp32": (0.338, 9096), "pytorch/int8": (0.264, 11919)}  # fmt: skip
    results = [InProcessResult(art(k), lat, rows, 32, 100) for k, (lat, rows) in figures.items()]
    kept, why = prune(results, keep=3)
    assert [a.label for a in kept] == ["pytorch/int8", "openvino/fp32", "onnxruntime/fp32", "onnxruntime/int8"]
    assert why["text_onnxruntime_fp16"].startswith("dominated in process by onnxruntime/fp32")
    assert why["text_pytorch_fp32"].startswith("dominated in process by openvino/fp32")
    # the lowest latency already among the fastest: nothing added
    fast = [*results[:-1], InProcessResult(art("pytorch/int8"), 0.22, 11000, 32, 100)]
    kept, why = prune(fast, keep=3)
    assert len(kept) == 3 and "not among the 3 fastest in process" in why["text_onnxruntime_int8"]


def test_the_budget_stops_the_climb() -> None:
    land = Landscape()
    quick_search(_grid(), [ORT, OV], land, budget=3)  # type: ignore[arg-type]
    assert len(land.results) == 3


def test_the_time_budget_stops_the_climb() -> None:
    land = Landscape()
    pick, log = quick_search(_grid(), [ORT, OV], land, budget=48, deadline=time.perf_counter())  # type: ignore[arg-type]
    assert len(land.results) == 1 and pick is not None
    assert log[-1] == "time budget reached after 1 grid points"


@dataclass
class TimedLandscape(NoisyLandscape):
    """A noisy landscape on a simulated clock: a full search takes 10 s, one cut short 2 s."""

    clock: float = 0.0
    full_seconds: list[float] = field(default_factory=list)

    @property
    def seconds_per_search(self) -> float | None:
        return sum(self.full_seconds) / len(self.full_seconds) if self.full_seconds else None

    def _tick(self, search: RateSearch, incumbent: float | None) -> None:
        took = 10.0 if search.complete else 2.0
        self.clock += took
        if incumbent is None and search.complete:
            self.full_seconds.append(took)

    def measure(self, c: Candidate, incumbent: float | None = None) -> Measured:
        m = super().measure(c, incumbent)
        self._tick(m.search, incumbent)
        return m

    def remeasure(self, c: Candidate, incumbent: float | None = None) -> RateSearch:
        search = super().remeasure(c, incumbent)
        self._tick(search, incumbent)
        return search


def test_a_late_move_is_left_the_time_to_be_confirmed(monkeypatch: pytest.MonkeyPatch) -> None:
    """ResNet-50, 2026-12-03: the start's lucky figure cut a neighbour short; searched again against the start's
    median it won on one search, and the confirmation after it ran out of time, so the pick stood on one figure.
    Now the re-check stops where the confirmation's time begins, and a confirmation that cannot finish searches
    each point of its group alike."""
    from servelab.advisor import search as search_mod

    grid = Grid((ORT,), (Batching(), Batching(8, 200), Batching(32, 1000)), (1,), (1,), ("rest",))
    lucky, steady = Candidate(ORT, Batching(8, 200), 1, 1, "rest"), Candidate(ORT, Batching(), 1, 1, "rest")
    slow = Candidate(ORT, Batching(32, 1000), 1, 1, "rest")
    figures = {lucky: [3000.0, 1000.0, 1000.0, 1000.0], steady: [1500.0, 1400.0, 1450.0, 1420.0], slow: [900.0]}

    def run(budget_s: float) -> tuple[Candidate | None, list[str], TimedLandscape]:
        land = TimedLandscape(figures=figures)
        monkeypatch.setattr(search_mod, "_now", lambda: land.clock)
        pick, log = quick_search(grid, [ORT], land, budget=3, deadline=budget_s, concurrency=16)  # type: ignore[arg-type]
        return pick, log, land

    # time for everything: steady is searched again, wins, and is confirmed with two more searches
    pick, log, land = run(1e6)
    assert pick == steady and len(land.results[steady].searches) == 4, log
    # 10 s a search: the start, two neighbours cut short (4 s), lucky confirmed (20 s) -> 34 s; 60 s kept for
    # confirming three points twice leaves no time to search steady again before 94 s: the confirmed start stands
    pick, log, land = run(90.0)
    assert pick == lucky and land.results[lucky].max_rate == 1000.0, log
    assert "60 s of the time budget kept for confirming (3 points x 2 searches x 10.0 s a search)" in log
    assert land.searched.count(steady) == 1  # only the climb's cut-short search: no move it could not confirm
    assert "no time to search again 2 point(s) cut short against up to 3,000 req/s" in log  # steady and slow
    # a confirmation that does not fit searches each point alike (one round each), then stops
    pick, log, land = run(25.0)
    assert "time left for 1 of 2 confirming rounds" in log, log
    assert len(land.results[lucky].searches) == 2
    assert land.results[lucky].max_rate == 1000.0  # of two searches the lower stands: not the lucky 3,000


def test_a_search_against_an_incumbent_has_the_same_ceiling_as_a_full_one() -> None:
    """A loose SLA lets a few seconds of overload pass: every rate passes here. A search against an incumbent
    once bracketed above the bar it passed (1.2x) and read ~20% above the same point's full search; each move of
    ResNet-50's climb then ratcheted the bar up by the 3% margin on overload alone."""
    capacity = 1000.0

    def measure(mode: str, level: float) -> Probe:
        if mode == "concurrency":
            return Probe(mode, level, capacity, 1.0, 8.0, 0, 100.0, True)
        return Probe(mode, level, min(level, capacity), 1.0, 8.0, 0, 100.0, True)

    full = search_rate(measure, steps=4, concurrency=16)
    against = search_rate(measure, steps=4, concurrency=16, incumbent=1000.0)
    assert full.complete and against.complete
    assert full.best_rate <= 1100.0 and against.best_rate <= 1100.0, (full.best_rate, against.best_rate)
    # its bar (1,123) passed, but above the ceiling a full search would reach: it does not beat the incumbent
    above = search_rate(measure, steps=4, concurrency=16, incumbent=1090.0)
    assert not above.complete and above.best_rate == 0.0 and len(above.probes) == 2


def _probe(rate: float, capacity: float, sla: float) -> Probe:
    p99 = 5.0 / max(1e-6, 1 - rate / capacity) if rate < capacity else 1e4
    return Probe("request_rate", rate, min(rate, capacity), 1.0, p99, 0, 100.0, p99 <= sla)


def test_rate_search_bisects_to_the_sla_and_stops_early_against_a_better_incumbent() -> None:
    capacity, sla = 1000.0, 50.0  # P99 = 5 / (1 - rate/capacity): meets 50 ms up to 900 req/s

    def measure(mode: str, level: float) -> Probe:
        if mode == "concurrency":
            return Probe(mode, level, capacity, 1.0, 8.0, 0, 100.0, True)
        return _probe(level, capacity, sla)

    full = search_rate(measure, steps=5, concurrency=16)
    assert full.complete and 820 <= full.best_rate <= 900
    early = search_rate(measure, steps=5, concurrency=16, incumbent=950.0)
    assert not early.complete and len(early.probes) == 1 and early.best_rate == 0


def test_a_narrow_miss_is_measured_again_and_a_collapse_is_believed() -> None:
    capacity, sla = 1000.0, 50.0
    stalls = {700.0}  # the first probe at 700 req/s meets one stall: P99 80 ms though the server kept up

    def measure(mode: str, level: float) -> Probe:
        if mode == "concurrency":
            return Probe(mode, level, capacity, 1.0, 8.0, 0, 100.0, True)
        if level in stalls:
            stalls.discard(level)
            return Probe(mode, level, level, 1.0, 80.0, 0, 100.0, False)
        return _probe(level, capacity, sla)

    # an incumbent of 700 / 1.03 makes the first probe (the check against it) the stalled one
    confirmed = search_rate(measure, steps=5, concurrency=16, incumbent=700.0 / 1.03, sla_p99_ms=sla)
    assert confirmed.complete and 820 <= confirmed.best_rate <= 900
    assert [p.ok for p in confirmed.probes[:2]] == [False, True]  # both probes recorded
    stalls.add(700.0)
    believed = search_rate(measure, steps=5, concurrency=16, incumbent=700.0 / 1.03)  # no SLA given: no retry
    assert not believed.complete and len(believed.probes) == 1
    collapse = Probe("request_rate", 900.0, 300.0, 1.0, 4000.0, 0, 100.0, False)  # did not keep up: no retry
    assert not marginal(collapse, sla) and marginal(Probe("request_rate", 900.0, 890.0, 1.0, 80.0, 0, None, False), sla)


def _row(label: str, rate: float, p99: float, rss: float, drop: float = 0.0, kind: str = "candidate") -> Row:
    probes = [Probe("request_rate", rate, rate, 1.0, p99, 0, rss, True)]
    return Row(label, kind, "onnxruntime", "servelab" if kind == "candidate" else "mlserver", "rest", "fp32",
               RateSearch(probes, best_rate=rate), drop)  # fmt: skip


def test_decision_matrix_constraints_scores_and_verdicts() -> None:
    rows = [_row("fast", 3000, 40, 300), _row("lean", 1500, 20, 120), _row("slow", 600, 30, 100),
            _row("inaccurate", 5000, 10, 100, drop=0.2), _row("peer", 4000, 10, 90, kind="reference")]  # fmt: skip
    constraints = Constraints(50.0, min_throughput=1000, max_memory_mb=400, max_accuracy_drop=0.05)
    decision = decide(rows, constraints, parse_weights("throughput=1,latency=0,memory=0,accuracy=0"), load_qualitative())
    by = {r.label: r for r in rows}
    assert decision.winner is by["fast"]  # the peer is faster but a reference row, never the pick
    assert "below --min-throughput" in by["slow"].verdict and not by["slow"].feasible
    assert "exceeds --max-accuracy-drop" in by["inaccurate"].verdict
    assert by["lean"].verdict.startswith("score") and "throughput 1,500 req/s vs 3,000 req/s" in by["lean"].verdict
    assert by["peer"].verdict.startswith("reference row")
    assert by["peer"] in decision.front and by["inaccurate"] in decision.front
    weights = parse_weights("memory=1,throughput=0,latency=0,accuracy=0,model_support=0,tooling=0,"
                            "deployment_effort=0,edge_suitability=0,team_stack=0")  # fmt: skip
    assert decide(rows, constraints, weights, load_qualitative()).winner is by["lean"]


def test_a_row_searched_once_does_not_outrank_a_confirmed_median() -> None:
    """ResNet-50, 2026-12-03: a neighbour's one search (45 req/s) topped the pick's confirmed median (44) once
    the time for confirming it was gone, and the matrix picked it; a confirmed row now wins over it."""
    lucky, steady, slow = _row("lucky", 45, 300, 500), _row("steady", 44, 500, 600), _row("slow", 30, 300, 400)
    lucky.confirmed, steady.confirmed, slow.confirmed = False, True, False
    weights = parse_weights("throughput=1,latency=0,memory=0,accuracy=0")
    decision = decide([lucky, steady, slow], Constraints(1000.0), weights, load_qualitative())
    assert decision.winner is steady
    assert lucky.verdict.startswith("searched once, not confirmed: its one figure (45 req/s)"), lucky.verdict
    assert slow.verdict.startswith("score")  # behind anyway: the usual verdict
    # no row confirmed (an exhaustive sweep: every row searched once): the highest figure wins
    for r in (lucky, steady, slow):
        r.confirmed = None
    assert decide([lucky, steady, slow], Constraints(1000.0), weights, load_qualitative()).winner is lucky


def test_bad_options_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="--weights"):
        parse_weights("speed=1")
    with pytest.raises(InvalidArgument, match="--batching"):
        parse_batching("eight")
    with pytest.raises(InvalidArgument, match="no artefact"):
        Grid(())
    with pytest.raises(InvalidArgument, match="no grid point fits"):
        Grid((ArtefactRef("m", "onnxruntime", "fp32", 4),), (Batching(8, 100),))


def test_the_in_process_batch_fits_the_run_for_slow_and_fast_models() -> None:
    assert choose_batch(0.0003, 32, 0.5) == 32  # a small text encoder: the whole max batch
    assert choose_batch(0.030, 32, 0.5) == 5  # a ResNet-50 at 30 ms a row: what fits a third of the run
    assert choose_batch(0.160, 32, 0.5) == 4  # slower still: never below 4 rows ...
    assert choose_batch(0.160, 2, 0.5) == 2  # ... unless max_batch_size (or the data) has fewer


def test_a_slow_models_windows_hold_enough_arrivals_and_keeping_up_is_judged_on_what_was_sent() -> None:
    settings = MeasureSettings(1000.0, window_ms=1000)
    assert settings.load("request_rate", 500.0).measurement_interval_ms == 1000  # a fast model: the window as set
    slow = settings.load("request_rate", 5.0)  # a ResNet-50's rate: 5 arrivals a second would be a 1 s window
    assert slow.measurement_interval_ms == 1000 * MIN_WINDOW_REQUESTS // 5
    assert slow.max_level_s >= slow.measurement_interval_ms * slow.max_windows / 1000
    assert settings.load("concurrency", 4).measurement_interval_ms == 1000
    # the Poisson draw sent 4 where 6 a second were asked and the server answered all 4: it kept up ...
    drawn_low = Probe("request_rate", 6.0, 4.0, 100.0, 1200.0, 0, None, False, kept_up=True)
    assert drawn_low.keeps_up and marginal(drawn_low, 1000.0)
    # ... while a server that answered a third of what it was sent did not, whatever the draw
    behind = Probe("request_rate", 6.0, 5.5, 100.0, 1200.0, 0, None, False, kept_up=False)
    assert not behind.keeps_up and not marginal(behind, 1000.0)
    # a probe built without the sent count is judged on the nominal rate
    assert not Probe("request_rate", 6.0, 4.0, 100.0, 1200.0, 0, None, False).keeps_up


def test_a_configuration_too_slow_for_the_sla_is_given_up_after_a_light_load_and_a_slow_window_is_capped() -> None:
    sla = 1000.0
    seen: list[tuple[str, float]] = []

    def hopeless(mode: str, level: float) -> Probe:  # one image in ~1.4 s: no load meets a 1 s P99
        seen.append((mode, level))
        if mode == "concurrency":
            return Probe(mode, level, 2.0, 8000.0, 9000.0, 0, None, True)
        return Probe(mode, level, level, 1400.0, 1500.0, 0, None, False, kept_up=True)

    out = search_rate(hopeless, steps=4, concurrency=16, sla_p99_ms=sla)
    assert out.best_rate == 0.0 and out.complete
    assert seen == [("concurrency", 16), ("request_rate", 1.6), ("request_rate", 1.0)]  # not 4 steps, twice each

    def slow_but_fine(mode: str, level: float) -> Probe:  # capacity 20/s, P50 over the SLA only past 15/s
        if mode == "concurrency":
            return Probe(mode, level, 20.0, 800.0, 900.0, 0, None, True)
        p50 = 100.0 if level <= 15 else 2000.0
        return Probe(mode, level, level, p50, p50 * 1.2, 0, None, p50 * 1.2 <= sla, kept_up=True)

    found = search_rate(slow_but_fine, steps=4, concurrency=16, sla_p99_ms=sla)
    assert 12.0 <= found.best_rate <= 15.0  # the light load passed, the bisection went on from there
    assert MeasureSettings(sla, window_ms=1000).load("request_rate", 0.5).measurement_interval_ms == 5000
