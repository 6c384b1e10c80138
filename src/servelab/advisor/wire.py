"""Measuring a candidate over the wire: serve it with ``servelab serve``, offer loads, find the highest rate
that keeps P99 under the SLA.

One server per configuration (both front doors on it); each *probe* is one open-loop level at a request
rate (Poisson arrivals) measured by ``servelab.bench``. A probe passes when P99 is within the SLA, no
request failed and the server kept up (completed at least 85% of the requests the generator sent in the
measured windows: judged against what was sent, not the nominal rate, because a few-second window of Poisson
arrivals at a slow model's rate varies by more than 15% on its own; a window holds at least
``MIN_WINDOW_REQUESTS`` arrivals, so a slow model's windows are longer). :func:`search_rate`
brackets the rate with one closed-loop level (the capacity) and bisects; given an incumbent's rate it
first asks only "does this candidate beat it?" and stops after one probe when the answer is no.

Requests come from the samples file (``data_path``, batches of ``client_batch`` samples built by the bench)
or, for a model that does not batch, are the whole requests themselves (``requests``), sent as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from servelab.advisor.configs import artefact_config, candidate_config, install_model
from servelab.advisor.grid import Candidate
from servelab.bench import InputSpec, LevelResult, LoadSpec, TargetSpec, measure_level, run_sweep
from servelab.bench.net import http_status
from servelab.bench.peers.servelab_target import ServelabPeer
from servelab.errors import ServelabError

__all__ = ["MeasureSettings", "Probe", "RateSearch", "Served", "measure_probe", "search_rate"]

Progress = Callable[[str], None]
#: the share of the offered rate a server must complete for the probe to count as keeping up
KEEP_UP = 0.85
#: a request-rate window lasts long enough for this many arrivals (a ResNet-50 at 10 requests/s: 2 s windows) ...
MIN_WINDOW_REQUESTS = 20
#: ... but at most this many times ``window_ms`` (an INT8 ResNet-50 on one thread answers one image a second)
MAX_WINDOW_FACTOR = 5
#: how much a neighbour must beat the incumbent by before it is searched in full
BEAT_MARGIN = 0.03
#: a search's highest rate probed: this times the closed-loop capacity
HEADROOM = 1.1


@dataclass(frozen=True)
class MeasureSettings:
    """How each probe is measured (every duration is a flag of ``servelab select``)."""

    sla_p99_ms: float
    data_path: str | None = None
    client_batch: int = 1
    window_ms: int = 1000
    max_windows: int = 3
    warmup_requests: int = 20
    closed_concurrency: int = 16
    rate_steps: int = 4
    max_inflight: int = 2048
    #: whole requests of a model that does not batch, sent as they are (instead of batches of data_path's samples)
    requests: tuple[dict[str, np.ndarray], ...] = field(default=(), repr=False, compare=False)

    def window_ms_at(self, mode: str, level: float) -> int:
        """The measurement window of a level: ``window_ms``, longer at a rate too low to fill it."""
        if mode != "request_rate" or level <= 0:
            return self.window_ms
        wanted = int(1000 * MIN_WINDOW_REQUESTS / level + 0.5)
        return max(self.window_ms, min(wanted, MAX_WINDOW_FACTOR * self.window_ms))

    def load(self, mode: str, level: float) -> LoadSpec:
        window_ms = self.window_ms_at(mode, level)
        cap = max(10.0, window_ms * self.max_windows * 4 / 1000)
        # at a request rate, warm up for at most about a second of arrivals: a slow model (a ResNet-50 at a
        # few requests/s) would otherwise spend longer warming up than measuring
        warmup = self.warmup_requests if mode != "request_rate" else max(3, min(self.warmup_requests, int(level)))
        return LoadSpec(
            mode=mode, levels=(level,), arrivals="poisson" if mode == "request_rate" else "constant",  # type: ignore[arg-type]
            measurement_interval_ms=window_ms, max_windows=self.max_windows,
            warmup_requests=warmup, max_inflight=self.max_inflight, max_level_s=cap,
        )  # fmt: skip

    def inputs(self) -> InputSpec:
        return InputSpec(data_path=self.data_path, batch_size=self.client_batch)


@dataclass
class Probe:
    mode: str
    offered: float
    achieved_rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    rss_mb: float | None
    ok: bool
    failure: str = ""
    #: whether the server completed KEEP_UP of what was sent (measure_probe sets it; None, a probe built without
    #: the sent count, is judged on the nominal rate)
    kept_up: bool | None = None

    @property
    def keeps_up(self) -> bool:
        if self.mode != "request_rate":
            return True
        return self.kept_up if self.kept_up is not None else self.achieved_rps >= KEEP_UP * self.offered

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass
class RateSearch:
    """The probes of one candidate and the highest passing rate (0 when none passed)."""

    probes: list[Probe] = field(default_factory=list)
    best_rate: float = 0.0
    capacity_rps: float = 0.0
    complete: bool = True
    error: str | None = None

    @property
    def best_probe(self) -> Probe | None:
        passing = [p for p in self.probes if p.mode == "request_rate" and p.ok]
        return max(passing, key=lambda p: p.offered) if passing else None

    @property
    def rss_mb(self) -> float | None:
        seen = [p.rss_mb for p in self.probes if p.rss_mb is not None]
        return max(seen) if seen else None

    def to_dict(self) -> dict[str, object]:
        return {
            "best_rate": self.best_rate, "capacity_rps": self.capacity_rps, "complete": self.complete,
            "error": self.error, "probes": [p.to_dict() for p in self.probes],
        }  # fmt: skip


def _level(target: TargetSpec, model: str, settings: MeasureSettings, mode: str, level: float) -> LevelResult:
    load = settings.load(mode, level)
    if not settings.requests:
        return run_sweep(target, model, load, settings.inputs(), measure_ceiling=False).levels[0]
    return asyncio.run(measure_level(target, model, list(settings.requests), load, level))


def measure_probe(target: TargetSpec, model: str, settings: MeasureSettings, mode: str, level: float) -> Probe:
    """One level against ``target``; the SLA verdict included."""
    lv = _level(target, model, settings, mode, level)
    hist = lv.summary.histogram
    p99 = hist.percentile(99) * 1e3 if lv.summary.completed else float("inf")
    errors = sum(lv.errors.values())
    failure = "; ".join(lv.failures)
    # judged on what was sent: the generator times each request from its scheduled send, so a client that
    # falls behind shows as latency (the SLA), and the Poisson draw of a short window is not held against it
    kept_up = mode != "request_rate" or (lv.sent > 0 and lv.summary.completed >= KEEP_UP * lv.sent)
    ok = lv.summary.completed > 0 and errors == 0 and not failure and p99 <= settings.sla_p99_ms and kept_up
    return Probe(mode, level, lv.throughput_rps, hist.percentile(50) * 1e3 if lv.summary.completed else float("inf"),
                 p99, errors, lv.server_rss_mb, ok, failure, kept_up)  # fmt: skip


#: a probe that kept up with its rate, without errors, whose P99 missed the SLA by less than this factor is
#: measured once more before it is believed: one stall in a one-second window (a collection, a neighbour's
#: burst on 2 shared cores) must not end a search that the configuration would have passed
MARGINAL_P99 = 10.0


def marginal(probe: Probe, sla_p99_ms: float) -> bool:
    """A failed request-rate probe that kept up and missed the SLA narrowly: worth a second look. Not when
    the median request missed it too: that is no stall but the configuration's speed."""
    return (not probe.ok and probe.mode == "request_rate" and probe.errors == 0 and not probe.failure
            and probe.keeps_up and probe.p99_ms <= MARGINAL_P99 * sla_p99_ms and probe.p50_ms <= sla_p99_ms)  # fmt: skip


#: after a probe the server did not keep up with, wait (at most this long) until it has stopped executing the
#: backlog that probe left: else the next probe, on the same server, meets that backlog and fails for it
DRAIN_TIMEOUT_S = 15.0


def executions(http_url: str, model: str) -> int | None:
    """The model's successful inference count from the server's OIP statistics (None: no answer)."""
    status, body = http_status(f"{http_url}/v2/models/{model}/stats", timeout_s=2.0)
    if status != 200:
        return None
    try:
        stats = json.loads(body)["model_stats"]
        return sum(int(m["inference_stats"]["success"]["count"]) for m in stats)
    except (ValueError, KeyError, TypeError):
        return None


def wait_drained(http_url: str, model: str, timeout_s: float = DRAIN_TIMEOUT_S, poll_s: float = 0.25) -> float:
    """Wait until the server's execution count stops growing (two polls ``poll_s`` apart with no new
    execution) or ``timeout_s`` passes; returns the seconds waited."""
    started = time.monotonic()
    last = executions(http_url, model)
    while time.monotonic() - started < timeout_s:
        time.sleep(poll_s)
        now = executions(http_url, model)
        if now is None or now == last:
            break
        last = now
    return time.monotonic() - started


def search_rate(
    measure: Callable[[str, float], Probe], steps: int, concurrency: int, incumbent: float | None = None,
    sla_p99_ms: float | None = None,
) -> RateSearch:
    """The highest request rate that passes; with ``incumbent``, stop early unless this beats it. With
    ``sla_p99_ms``, a :func:`marginal` failure is measured once more and the second verdict kept (both
    probes are recorded), and a first failure whose median already misses the SLA is followed at once by a
    light load (a tenth of capacity): if that fails too, the search ends there with no passing rate."""
    out = RateSearch()

    def probe_rate(rate: float) -> Probe:
        got = measure("request_rate", rate)
        out.probes.append(got)
        if sla_p99_ms is not None and marginal(got, sla_p99_ms):
            got = measure("request_rate", rate)
            out.probes.append(got)
        return got

    lo = 0.0
    if incumbent is not None and incumbent > 0:
        first = probe_rate(incumbent * (1 + BEAT_MARGIN))
        if not first.ok:
            out.complete = False
            return out
        lo = out.best_rate = first.offered
    closed = measure("concurrency", concurrency)
    out.probes.append(closed)
    out.capacity_rps = closed.achieved_rps
    # the upper bracket is the measured capacity's, with or without an incumbent, so that every search's figure
    # has the same ceiling: a bracket set above the passed bar instead let a slow model's searches against an
    # incumbent climb past what the server sustains (a few seconds of overload pass a loose SLA) and read ~20%
    # above the same point's full searches, a lucky bar that cut its neighbours short (ResNet-50, 2026-12-03)
    hi = closed.achieved_rps * HEADROOM
    if lo > 0 and lo >= hi:
        # it passed the bar only above that ceiling: a full search of it would read below the bar, so it does not
        # beat the incumbent (a few seconds of overload pass a loose SLA: the ratchet ResNet-50's climb rode)
        out.best_rate, out.complete = 0.0, False
        return out
    if hi <= 0:
        out.error = closed.failure or "no request completed in the closed-loop run"
        return out
    rate = max(lo, 0.8 * closed.achieved_rps) if lo < 0.8 * closed.achieved_rps else (lo + hi) / 2

    def light_passes() -> bool:
        """Whether a light load (a tenth of capacity) meets the SLA at all; its rate is the best when it does."""
        probe = measure("request_rate", max(1.0, 0.1 * closed.achieved_rps))
        out.probes.append(probe)
        if probe.ok:
            out.best_rate = probe.offered
        return probe.ok

    for _ in range(steps):
        probe = probe_rate(rate)
        if probe.ok:
            lo = out.best_rate = max(out.best_rate, rate)
        else:
            hi = rate
            if out.best_rate == 0.0 and sla_p99_ms is not None and probe.p50_ms > sla_p99_ms:
                # the median request missed the SLA: ask at once whether a light load meets it at all (a
                # configuration that cannot is done after one more probe, not after every bisection step; one
                # that can has a best rate from here on, so this is asked once)
                if not light_passes():
                    return out
                lo = out.best_rate
        rate = (lo + hi) / 2
    if out.best_rate == 0.0:  # nothing passed near capacity: does a light load meet the SLA at all?
        light_passes()
    return out


class Served:
    """One running ``servelab serve`` for a candidate's configuration; stopped on exit."""

    def __init__(self, candidate: Candidate, convert_repo: Path, progress: Progress, name: str = "candidate") -> None:
        self.candidate = candidate
        self.name = name
        self._convert_repo = convert_repo
        self._say = progress
        self._stack = contextlib.ExitStack()
        self.endpoint: object = None

    def __enter__(self) -> Served:
        tmp = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="servelab-select-")))
        folder = self._convert_repo / self.candidate.artefact.model
        config = candidate_config(artefact_config(folder), self.candidate, self.name)
        install_model(folder, config, tmp / "repo")
        peer = self._stack.enter_context(ServelabPeer(tmp / "repo", self.name, work_dir=tmp / "work"))
        try:
            peer.prepare()  # type: ignore[arg-type]
            self.endpoint = peer.start()
        except ServelabError:
            self._stack.close()
            raise
        return self

    @property
    def http_url(self) -> str:
        """The server's HTTP port (its statistics answer there whatever the front door measured)."""
        return str(self.endpoint.extra["http"])  # type: ignore[attr-defined]

    def target(self, front_door: str) -> TargetSpec:
        ep = self.endpoint
        extra = ep.extra  # type: ignore[attr-defined]
        if front_door == "grpc":
            return TargetSpec("oip-grpc", extra["grpc"], server_pid=ep.pid)  # type: ignore[attr-defined]
        return TargetSpec("oip-http", extra["http"], binary=True, server_pid=ep.pid)  # type: ignore[attr-defined]

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
