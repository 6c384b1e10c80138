"""The search over served candidates: a quick climb that measures a fraction of the grid, and the
exhaustive sweep it is judged against (``benchmarks/select_vs_exhaustive.py``).

Quick search, after Triton Model Analyzer's: start from the in-process winner with one instance and every
thread, dynamic batching on and every thread unless the in-process run says they do not pay (StartHints); find its highest rate within the SLA; then measure each neighbour (one
step along one dimension) only as far as needed to know whether it beats the incumbent; move to the
best neighbour that does and repeat, until none does, the measurement budget (a share of the grid) is spent,
or the time budget is (``deadline``: what ``servelab select --time-budget-min`` leaves after the peers' share).
Then :func:`confirm`: the incumbent and its nearest rivals are searched again, in alternating order, and the
median search of each stands (one search of one point varies by up to +-30% between runs on 2 shared cores, so
a climb that stops on one lucky figure would otherwise pick on luck).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from servelab.advisor.grid import ArtefactRef, Candidate, Grid
from servelab.advisor.wire import (
    MeasureSettings,
    Probe,
    RateSearch,
    Served,
    measure_probe,
    search_rate,
    wait_drained,
)
from servelab.errors import ServelabError

__all__ = [
    "Measured", "Measurer", "StartHints", "batching_gain", "confirm", "exhaustive_search", "quick_search", "start_point",
]

Progress = Callable[[str], None]
#: a neighbour replaces the incumbent only when it is this much faster (noise is not progress)
IMPROVEMENT = 0.01
#: after the climb, the incumbent and at most this many rivals are searched again ...
CONFIRM_RIVALS = 2
#: ... rivals: measured points whose figure comes within this share of the incumbent's rate ...
CONFIRM_WITHIN = 0.2
#: ... this many more times each, in alternating order; the median search of each stands
CONFIRM_ROUNDS = 2


@dataclass
class Measured:
    candidate: Candidate
    search: RateSearch
    order: int
    seconds: float = 0.0
    #: every search of this point's (the climb's first, then :func:`confirm`'s); ``search`` is their median
    searches: list[RateSearch] = field(default_factory=list)

    @property
    def max_rate(self) -> float:
        return self.search.best_rate

    @property
    def complete(self) -> bool:
        return self.search.complete and self.search.error is None

    @property
    def best_probe(self) -> Probe | None:
        return self.search.best_probe

    @property
    def figure(self) -> float:
        """What this point is known to reach: its best rate, or for a search cut short against an incumbent
        (one failed probe), what that probe completed: a lower bound that says how near it came."""
        if self.complete or self.max_rate > 0:
            return self.max_rate
        done = [p.achieved_rps for p in self.search.probes if p.mode == "request_rate"]
        return max(done, default=0.0)


@dataclass
class Measurer:
    """Measures candidates over the wire, keeping one server up while candidates share its configuration."""

    settings: MeasureSettings
    convert_repo: object
    progress: Progress = field(default=lambda _m: None)
    results: dict[Candidate, Measured] = field(default_factory=dict)
    probes: int = 0
    _served: Served | None = None

    def _server(self, c: Candidate) -> Served:
        if self._served is not None and self._served.candidate.server_key == c.server_key:
            return self._served
        self.close()
        self.progress(f"serving {c.label.rsplit(' ', 1)[0]}")
        self._served = Served(c, self.convert_repo, self.progress).__enter__()  # type: ignore[arg-type]
        # a cold server's first level pays for allocations and caches: one closed-loop level warms it, so the
        # first probe of a neighbour on a fresh server is not judged on start-up cost
        self.probes += 1
        measure_probe(self._served.target(c.front_door), self._served.name, self.settings, "concurrency",
                      self.settings.closed_concurrency)  # fmt: skip
        return self._served

    def measure(self, c: Candidate, incumbent: float | None = None) -> Measured:
        started = time.perf_counter()
        return self._keep(c, self._search(c, incumbent), started)

    def remeasure(self, c: Candidate) -> RateSearch:
        """Search an already measured point again, in full (no incumbent to stop at); it stays one grid point."""
        started = time.perf_counter()
        search = self._search(c, None)
        self.results[c].seconds += time.perf_counter() - started
        return search

    def _search(self, c: Candidate, incumbent: float | None) -> RateSearch:
        try:
            served = self._server(c)
        except ServelabError as exc:
            return RateSearch(complete=False, error=f"server did not start: {exc.message}")
        target = served.target(c.front_door)

        def probe(mode: str, level: float) -> Probe:
            self.probes += 1
            p = measure_probe(target, served.name, self.settings, mode, level)
            what = f"c={level:g}" if mode == "concurrency" else f"{level:,.0f}/s"
            verdict = "ok" if p.ok else "over SLA" if mode == "request_rate" else "-"
            self.progress(f"  {c.label} {what}: {p.achieved_rps:,.0f} req/s, P99 {p.p99_ms:.2f} ms {verdict}")
            if not p.keeps_up:  # it left a backlog behind
                waited = wait_drained(served.http_url, served.name)
                self.progress(f"  {c.label}: waited {waited:.1f} s for the backlog to drain")
            return p

        try:
            return search_rate(probe, self.settings.rate_steps, self.settings.closed_concurrency, incumbent,
                               self.settings.sla_p99_ms)
        except ServelabError as exc:
            return RateSearch(complete=False, error=exc.message)

    def _keep(self, c: Candidate, search: RateSearch, started: float) -> Measured:
        m = Measured(c, search, len(self.results), time.perf_counter() - started, [search])
        self.results[c] = m
        return m

    def close(self) -> None:
        if self._served is not None:
            self._served.__exit__(None, None, None)
            self._served = None


#: what one request costs the front door on top of the model call, in ms (REST on one core answers ~5,000
#: small requests/s: benchmarks/RESULTS.md, compare and select_vs_exhaustive); batching only amortises the call
WIRE_COST_MS = 0.2
#: dynamic batching is the start only where it is predicted to cut a request's cost by this factor ...
BATCHING_PAYS = 1.5
#: ... and every thread only where the in-process run at every thread is this much faster than at the fewest
#: (ONNX Runtime's intra-op threads spin: on 2 cores a second one that does not pay takes the front door's core)
THREADS_PAY = 1.3


def batching_gain(latency_ms: float, rows_per_s: float, wire_ms: float = WIRE_COST_MS) -> float:
    """Predicted cost of a request unbatched over its cost in a full batch, front door included: a model whose
    one-row call is cheap next to the wire (a tree ensemble) gains nothing from a batcher, and pays for it."""
    if not rows_per_s > 0 or not latency_ms >= 0:
        return 1.0
    return (wire_ms + latency_ms) / (wire_ms + 1e3 / rows_per_s)


@dataclass(frozen=True)
class StartHints:
    """What the in-process run says of the first survivor; None: no figure (batching on, every thread)."""

    batching_gain: float | None = None  # :func:`batching_gain`
    threads_gain: float | None = None  # speed at every thread over speed at the fewest

    def describe(self) -> str:
        parts = [f"{name} {v:.2f}x" for name, v in (("batching gain", self.batching_gain),
                                                   ("threads gain", self.threads_gain)) if v is not None]  # fmt: skip
        return f" (in process: {', '.join(parts)})" if parts else ""


def start_point(grid: Grid, best: ArtefactRef, hints: StartHints = StartHints()) -> Candidate:
    """The climb's start: one instance, the first front door, dynamic batching on (the middle setting) and
    every thread, unless the in-process ``hints`` say batching or the extra threads do not pay."""
    on = [b for b in grid.batchings if b.on and b.max_batch_size <= best.max_batch_size] or list(grid.batchings)
    off = [b for b in grid.batchings if not b.on]
    gain, tgain = hints.batching_gain, hints.threads_gain
    batching = off[0] if off and gain is not None and gain < BATCHING_PAYS else on[len(on) // 2]
    threads = min(grid.threads) if tgain is not None and tgain < THREADS_PAY else max(grid.threads)
    return Candidate(best, batching, min(grid.instances), threads, grid.front_doors[0])  # type: ignore[arg-type]


def _ordered(neighbours: list[Candidate], incumbent: Candidate) -> list[Candidate]:
    """Neighbours on the running server first (no restart), then the rest in grid order."""
    return sorted(neighbours, key=lambda n: n.server_key != incumbent.server_key)


def _spent(measurer: Measurer, budget: int, deadline: float | None, log: list[str]) -> bool:
    """Whether the point budget or the time budget is used up (said once in the log)."""
    if len(measurer.results) >= budget:
        log.append(f"budget of {budget} grid points reached")
        return True
    if deadline is not None and time.perf_counter() >= deadline:
        log.append(f"time budget reached after {len(measurer.results)} grid points")
        return True
    return False


def quick_search(
    grid: Grid, survivors: list[ArtefactRef], measurer: Measurer, budget: int, deadline: float | None = None,
    hints: StartHints = StartHints(), confirm_rounds: int = CONFIRM_ROUNDS,
) -> tuple[Candidate | None, list[str]]:
    """Climb from :func:`start_point` (``hints``: the in-process run's, of the first survivor), then
    :func:`confirm` the incumbent against its rivals ``confirm_rounds`` times; returns the pick and a log of
    the moves. ``deadline`` is a ``time.perf_counter()`` value after which nothing new is measured."""
    pool = tuple(survivors)
    incumbent = start_point(grid, survivors[0], hints)
    current = measurer.measure(incumbent)
    log = [f"start {incumbent.label}{hints.describe()}: {current.max_rate:,.0f} req/s within the SLA"]
    stopped = False
    while not stopped:
        fresh = [n for n in grid.neighbours(incumbent, pool) if n not in measurer.results]
        if not fresh:
            break
        best: Measured | None = None
        for n in _ordered(fresh, incumbent):
            if _spent(measurer, budget, deadline, log):
                stopped = True
                break
            m = measurer.measure(n, incumbent=current.max_rate or None)
            better = m.complete and m.max_rate > current.max_rate * (1 + IMPROVEMENT)
            if better and (best is None or m.max_rate > best.max_rate):
                best = m
        if best is None:
            if not stopped:
                log.append(f"no neighbour of {incumbent.label} beats {current.max_rate:,.0f} req/s: stop")
            break
        log.append(f"move to {best.candidate.label}: {best.max_rate:,.0f} req/s")
        incumbent, current = best.candidate, best
    if current.max_rate > 0:
        incumbent = confirm(measurer, incumbent, confirm_rounds, deadline, log)
    measurer.close()
    return (incumbent if measurer.results[incumbent].max_rate > 0 else None), log


def _median(searches: list[RateSearch]) -> RateSearch:
    """The search with the median best rate among the full ones (a search cut short against an incumbent says
    only "did not beat it" and is left out); of an even count, the upper middle one."""
    ranked = sorted([s for s in searches if s.complete] or searches, key=lambda s: s.best_rate)
    return ranked[len(ranked) // 2]


def confirm(measurer: Measurer, incumbent: Candidate, rounds: int, deadline: float | None, log: list[str]) -> Candidate:
    """Search the incumbent and its rivals (at most :data:`CONFIRM_RIVALS` other measured points whose
    :attr:`Measured.figure` comes within :data:`CONFIRM_WITHIN` of its rate) ``rounds`` more times each, in
    alternating order, so that drift on the machine falls on every one alike; each point's median search then
    stands in ``measurer.results`` (what the decision reads) and the best median is returned. Measures no new
    grid point; stops at ``deadline``."""
    lead = measurer.results[incumbent]
    floor = (1 - CONFIRM_WITHIN) * lead.max_rate
    rivals = sorted((m for m in measurer.results.values() if m.candidate != incumbent and m.search.error is None
                     and m.figure >= floor), key=lambda m: -m.figure)[:CONFIRM_RIVALS]  # fmt: skip
    if rounds <= 0 or not rivals:
        return incumbent
    group = [lead, *rivals]
    turns = [m for r in range(rounds) for m in (group[::-1] if r % 2 == 0 else group)]
    for i, m in enumerate(turns):
        if deadline is not None and time.perf_counter() >= deadline:
            log.append(f"time budget reached while confirming ({i} of {len(turns)} searches done)")
            break
        m.searches.append(measurer.remeasure(m.candidate))
    for m in group:
        m.search = _median(m.searches)
    pick = max(group, key=lambda m: (m.max_rate, m is lead))
    rates = "; ".join(f"{m.candidate.label} {'/'.join(f'{s.best_rate:,.0f}' for s in m.searches)} -> {m.max_rate:,.0f}"
                      for m in group)  # fmt: skip
    log.append(f"confirmed (req/s of each search -> median): {rates}; pick {pick.candidate.label}")
    return pick.candidate


def exhaustive_search(points: list[Candidate], measurer: Measurer) -> None:
    """Measure every point in full (servers reused across front doors)."""
    for c in sorted(points, key=lambda p: (repr(p.server_key), p.front_door)):
        measurer.measure(c)
    measurer.close()
