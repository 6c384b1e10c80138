"""The search over served candidates: a quick climb that measures a fraction of the grid, and the
exhaustive sweep it is judged against (``benchmarks/select_vs_exhaustive.py``).

Quick search, after Triton Model Analyzer's: start from the in-process winner with one instance and every
thread, dynamic batching on and every thread unless the in-process run says they do not pay (StartHints); find its highest rate within the SLA; then measure each neighbour (one
step along one dimension) only as far as needed to know whether it beats the incumbent; move to the
best neighbour that does and repeat, until none does, the measurement budget (a share of the grid) is spent,
or the time budget is (``deadline``: what ``servelab select --time-budget-min`` leaves after the peers' share).
Then :func:`confirm`: the incumbent and its nearest rivals are searched again, in alternating order, and the
median search of each stands (one search of one point varies by up to +-30% between runs on 2 shared cores, so
a climb that stops on one lucky figure would otherwise pick on luck); a measured point whose one figure still
tops the confirmed pick is confirmed against it in turn. A lucky incumbent also sets the bar its neighbours were
cut short against too high: after confirming, every neighbour cut short against a bar above the confirmed rate
is searched again against that rate, and where one beats it the climb goes on from there and is confirmed again
(at most :data:`RECLIMBS` times). With a deadline, each climb and re-check stops early enough to leave the
confirmation that follows it its time, at the run's own seconds per search (:func:`quick_search`), and a
confirmation that cannot finish searches every point of its group the same number of times.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from servelab.advisor.grid import ArtefactRef, Candidate, Grid
from servelab.advisor.measurer import Measured, Measurer
from servelab.advisor.wire import RateSearch

__all__ = [
    "Measured", "Measurer", "StartHints", "batching_gain", "confirm", "exhaustive_search", "quick_search", "start_point",
]

#: a neighbour replaces the incumbent only when it is this much faster (noise is not progress)
IMPROVEMENT = 0.01
#: after the climb, the incumbent and at most this many rivals are searched again ...
CONFIRM_RIVALS = 2
#: ... rivals: measured points whose figure comes within this share of the incumbent's rate ...
CONFIRM_WITHIN = 0.2
#: ... this many more times each, in alternating order; the median search of each stands
CONFIRM_ROUNDS = 2
#: after confirming, a measured point whose one figure tops the pick's median is confirmed too: at most this many
CONFIRM_OUTSIDERS = 3
#: neighbours cut short against a bar above the confirmed rate are searched again, and the climb resumed from
#: one that beats it, at most this many times
RECLIMBS = 2



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


def start_point(grid: Grid, best: ArtefactRef, hints: StartHints = StartHints(), concurrency: int | None = None) -> Candidate:
    """The climb's start: one instance, the first front door, dynamic batching on and every thread, unless the
    in-process ``hints`` say batching or the extra threads do not pay. The batching: with the load's
    ``concurrency`` known, the largest max batch that load can fill (a larger one never fills from it, so every
    batch waits out its queue delay); else the middle setting."""
    on = [b for b in grid.batchings if b.on and b.max_batch_size <= best.max_batch_size] or list(grid.batchings)
    off = [b for b in grid.batchings if not b.on]
    fills = [b for b in on if concurrency is not None and b.max_batch_size <= concurrency]
    gain, tgain = hints.batching_gain, hints.threads_gain
    batching = off[0] if off and gain is not None and gain < BATCHING_PAYS else fills[-1] if fills else on[len(on) // 2]
    threads = min(grid.threads) if tgain is not None and tgain < THREADS_PAY else max(grid.threads)
    return Candidate(best, batching, min(grid.instances), threads, grid.front_doors[0])  # type: ignore[arg-type]


def _ordered(neighbours: list[Candidate], incumbent: Candidate) -> list[Candidate]:
    """Neighbours on the running server first (no restart), then the rest in grid order."""
    return sorted(neighbours, key=lambda n: n.server_key != incumbent.server_key)


def _spent(measurer: Measurer, budget: int, deadline: float | None, log: list[str]) -> bool:
    """Whether the point budget or the time budget is used up (said once in the log)."""
    said = None
    if len(measurer.results) >= budget:
        said = f"budget of {budget} grid points reached"
    elif _late(deadline):
        said = f"time budget reached after {len(measurer.results)} grid points"
    if said is not None and said not in log:
        log.append(said)
    return said is not None


def _now() -> float:
    return time.perf_counter()


def _late(deadline: float | None) -> bool:
    return deadline is not None and _now() >= deadline


@dataclass(frozen=True)
class _Reserve:
    """The deadline of a phase that may move the incumbent: the time budget less what the confirmation after it
    needs (the incumbent and :data:`CONFIRM_RIVALS` rivals, ``rounds`` searches each, at the run's mean seconds
    per full search), so that a late move is not left standing on one search."""

    until: float | None
    why: str = ""

    @classmethod
    def of(cls, measurer: Measurer, deadline: float | None, rounds: int) -> _Reserve:
        per = measurer.seconds_per_search
        if deadline is None or per is None or rounds <= 0:
            return cls(deadline)
        kept = (1 + CONFIRM_RIVALS) * rounds * per
        return cls(deadline - kept, f"{kept:,.0f} s of the time budget kept for confirming "
                                    f"({1 + CONFIRM_RIVALS} points x {rounds} searches x {per:,.1f} s a search)")

    def said(self, log: list[str]) -> None:
        """Log the reserve once it is what stopped a phase."""
        if self.why and _late(self.until) and self.why not in log:
            log.append(self.why)


def quick_search(
    grid: Grid, survivors: list[ArtefactRef], measurer: Measurer, budget: int, deadline: float | None = None,
    hints: StartHints = StartHints(), confirm_rounds: int = CONFIRM_ROUNDS, concurrency: int | None = None,
) -> tuple[Candidate | None, list[str]]:
    """Climb from :func:`start_point` (``hints``: the in-process run's, of the first survivor), :func:`confirm`
    the incumbent against its rivals ``confirm_rounds`` times, then search again the neighbours cut short
    against a bar the confirmed rate does not reach and climb on from one that beats it; returns the pick and a
    log of the moves. ``deadline`` is a ``time.perf_counter()`` value after which nothing new is measured;
    ``concurrency``: the measuring load's (:func:`start_point`)."""
    pool = tuple(survivors)
    incumbent = start_point(grid, survivors[0], hints, concurrency)
    first = measurer.measure(incumbent)
    log = [f"start {incumbent.label}{hints.describe()}: {first.max_rate:,.0f} req/s within the SLA"]
    bars: dict[Candidate, float] = {}  # a neighbour cut short -> the incumbent rate it was measured against
    reserve = _Reserve.of(measurer, deadline, confirm_rounds)
    incumbent = _climb(grid, pool, measurer, incumbent, budget, reserve.until, log, bars)
    reserve.said(log)
    if measurer.results[incumbent].max_rate > 0 and confirm_rounds > 0:
        incumbent = confirm(measurer, incumbent, confirm_rounds, deadline, log)
        for _ in range(RECLIMBS):
            reserve = _Reserve.of(measurer, deadline, confirm_rounds)
            moved = _recheck(measurer, incumbent, reserve.until, log, bars)
            reserve.said(log)
            if moved is None:
                break
            climbed = _climb(grid, pool, measurer, moved, budget, reserve.until, log, bars)
            reserve.said(log)
            if _late(deadline):
                log.append(f"no time left to confirm {climbed.label}: the confirmed {incumbent.label} stands")
                break
            incumbent = confirm(measurer, climbed, confirm_rounds, deadline, log)
    measurer.close()
    return (incumbent if measurer.results[incumbent].max_rate > 0 else None), log


def _climb(grid: Grid, pool: tuple[ArtefactRef, ...], measurer: Measurer, incumbent: Candidate, budget: int,
           deadline: float | None, log: list[str], bars: dict[Candidate, float]) -> Candidate:
    """Move to the best neighbour that beats the incumbent until none does or a budget is spent; each neighbour
    cut short is noted in ``bars`` with the rate it had to beat."""
    current = measurer.results[incumbent]
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
            bar = current.max_rate or None
            m = measurer.measure(n, incumbent=bar)
            if bar is not None and not m.complete and m.search.error is None:
                bars[n] = bar
            better = m.complete and m.max_rate > current.max_rate * (1 + IMPROVEMENT)
            if better and (best is None or m.max_rate > best.max_rate):
                best = m
        if best is None:
            if not stopped:
                log.append(f"no neighbour of {incumbent.label} beats {current.max_rate:,.0f} req/s: stop")
            break
        log.append(f"move to {best.candidate.label}: {best.max_rate:,.0f} req/s")
        incumbent, current = best.candidate, best
    return incumbent


def _recheck(measurer: Measurer, incumbent: Candidate, deadline: float | None, log: list[str],
             bars: dict[Candidate, float]) -> Candidate | None:
    """Search again, against the confirmed rate, every point cut short against a bar above it and not since
    confirmed (best figure first); returns the one that beats that rate by the most, or None."""
    rate = measurer.results[incumbent].max_rate
    doubtful = sorted((c for c, bar in bars.items()
                       if bar > rate * (1 + IMPROVEMENT) and not measurer.results[c].complete),
                      key=lambda c: -measurer.results[c].figure)  # fmt: skip
    if not doubtful:
        return None
    if _late(deadline):
        log.append(f"no time to search again {len(doubtful)} point(s) cut short against up to "
                   f"{max(bars[c] for c in doubtful):,.0f} req/s")  # fmt: skip
        return None
    log.append(f"{len(doubtful)} point(s) cut short against up to {max(bars[c] for c in doubtful):,.0f} req/s, "
               f"above the confirmed {rate:,.0f}: searched again against it")  # fmt: skip
    best: Measured | None = None
    for c in doubtful:
        if _late(deadline):
            log.append("time budget reached while searching again")
            break
        m = measurer.results[c]
        m.searches.append(measurer.remeasure(c, rate))
        m.search = _median(m.searches)
        if not m.complete:
            bars[c] = rate  # cut short again, now against a confirmed rate
            continue
        del bars[c]
        if m.max_rate > rate * (1 + IMPROVEMENT) and (best is None or m.max_rate > best.max_rate):
            best = m
    if best is None:
        log.append(f"none beats {rate:,.0f} req/s: stop")
        return None
    log.append(f"move to {best.candidate.label}: {best.max_rate:,.0f} req/s")
    return best.candidate


def _median(searches: list[RateSearch]) -> RateSearch:
    """The search with the median best rate among the full ones (a search cut short against an incumbent says
    only "did not beat it" and is left out); of an even count, the lower middle one, so that a point searched
    twice does not stand on its luckier search (the climb's first search of a point is the one chosen for
    being high)."""
    ranked = sorted([s for s in searches if s.complete] or searches, key=lambda s: s.best_rate)
    return ranked[(len(ranked) - 1) // 2]


def confirm(measurer: Measurer, incumbent: Candidate, rounds: int, deadline: float | None, log: list[str]) -> Candidate:
    """Search the incumbent and its rivals (at most :data:`CONFIRM_RIVALS` other measured points whose
    :attr:`Measured.figure` comes within :data:`CONFIRM_WITHIN` of its rate) ``rounds`` more times each, in
    alternating order, so that drift on the machine falls on every one alike; each point's median search then
    stands in ``measurer.results`` (what the decision reads). Then any measured point searched once whose figure
    tops the best median is confirmed against it the same way (at most :data:`CONFIRM_OUTSIDERS`), so that no
    single lucky figure outranks a median. Returns the best median. Measures no new grid point; stops at
    ``deadline``."""
    if rounds <= 0 or _late(deadline):
        return incumbent
    lead = measurer.results[incumbent]
    floor = (1 - CONFIRM_WITHIN) * lead.max_rate
    rivals = sorted((m for m in measurer.results.values() if m.candidate != incumbent and m.search.error is None
                     and m.figure >= floor), key=lambda m: -m.figure)[:CONFIRM_RIVALS]  # fmt: skip
    pick = _confirm_group(measurer, [lead, *rivals], rounds, deadline, log)
    for _ in range(CONFIRM_OUTSIDERS):
        outsiders = [m for m in measurer.results.values()
                     if len(m.searches) <= 1 and m.complete and m.max_rate > pick.max_rate]  # fmt: skip
        if not outsiders or _late(deadline):
            break
        pick = _confirm_group(measurer, [pick, max(outsiders, key=lambda m: m.max_rate)], rounds, deadline, log)
    return pick.candidate


def _confirm_group(measurer: Measurer, group: list[Measured], rounds: int, deadline: float | None,
                   log: list[str]) -> Measured:
    """``rounds`` more searches of each of ``group`` in alternating order; medians stand; the best is returned
    (the first of ``group`` on a tie)."""
    per = measurer.seconds_per_search
    if deadline is not None and per:
        fits = max(1, int((deadline - _now()) // (len(group) * per)))  # every point searched alike
        if fits < rounds:
            log.append(f"time left for {fits} of {rounds} confirming rounds")
            rounds = fits
    turns = [m for r in range(rounds) for m in (group[::-1] if r % 2 == 0 else group)]
    for i, m in enumerate(turns):
        if _late(deadline):
            log.append(f"time budget reached while confirming ({i} of {len(turns)} searches done)")
            break
        m.searches.append(measurer.remeasure(m.candidate))
    for m in group:
        m.search = _median(m.searches)
    pick = max(group, key=lambda m: (m.max_rate, m is group[0]))
    rates = "; ".join(f"{m.candidate.label} {'/'.join(f'{s.best_rate:,.0f}' for s in m.searches)} -> {m.max_rate:,.0f}"
                      for m in group)  # fmt: skip
    log.append(f"confirmed (req/s of each search -> median): {rates}; pick {pick.candidate.label}")
    return pick


def exhaustive_search(points: list[Candidate], measurer: Measurer) -> None:
    """Measure every point in full (servers reused across front doors)."""
    for c in sorted(points, key=lambda p: (repr(p.server_key), p.front_door)):
        measurer.measure(c)
    measurer.close()
