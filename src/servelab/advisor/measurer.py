"""Measuring served candidates over the wire for the search: one ``servelab serve`` kept up while candidates
share its configuration, every search of a point kept, and the run's own seconds per full search (what
:mod:`servelab.advisor.search` keeps its confirmations' time by)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from servelab.advisor.grid import Candidate
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

__all__ = ["Measured", "Measurer"]

Progress = Callable[[str], None]


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
    #: seconds each full search (not cut short against an incumbent) took, server start included
    full_seconds: list[float] = field(default_factory=list)
    _served: Served | None = None

    @property
    def seconds_per_search(self) -> float | None:
        """The mean time of a full search in this run so far (None before the first)."""
        return sum(self.full_seconds) / len(self.full_seconds) if self.full_seconds else None

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
        search = self._search(c, incumbent)
        self._timed(search, incumbent, started)
        return self._keep(c, search, started)

    def remeasure(self, c: Candidate, incumbent: float | None = None) -> RateSearch:
        """Search an already measured point again, in full or (``incumbent``) only as far as needed to know
        whether it beats that rate; it stays one grid point. The caller keeps the search in ``searches``."""
        started = time.perf_counter()
        search = self._search(c, incumbent)
        self.results[c].seconds += self._timed(search, incumbent, started)
        return search

    def _timed(self, search: RateSearch, incumbent: float | None, started: float) -> float:
        took = time.perf_counter() - started
        if incumbent is None and search.complete and search.error is None:
            self.full_seconds.append(took)
        return took

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
