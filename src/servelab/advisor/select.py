"""``servelab select``: convert, prune in process, search the served grid, add peer rows, decide, write.

Flow 3 of DESIGN.md: candidates (runtime x precision x batching x instances x threads x front door) ->
convert makes and checks each artefact -> a quick in-process run prunes runtimes -> the quick search
measures a fraction of the served grid over the wire -> peers as reference rows -> the decision matrix
under the user's constraints -> the winning ``config.pbtxt`` in the repository and a report.

A model that does not batch (``max_batch_size`` 0: inputs with leading dimensions of their own, such as the
GraphSAGE layers) has no batching dimension in its grid (the report says so): instances x threads x runtime
x front door are searched, on whole requests from ``--data`` (or the request convert checked it on).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from servelab.advisor.configs import artefact_config, candidate_config, install_model
from servelab.advisor.converted import Converted, read_converted
from servelab.advisor.grid import ArtefactRef, Batching, Candidate, Grid
from servelab.advisor.inprocess import InProcessResult, measure_inprocess, prune
from servelab.advisor.matrix import Constraints, Decision, Row, decide, load_qualitative
from servelab.advisor.measurer import Measured, Measurer
from servelab.advisor.peers import PEERS, PeerRun, measure_peer, peer_artefacts, peer_settings
from servelab.advisor.search import (
    BATCHING_PAYS,
    StartHints,
    batching_gain,
    exhaustive_search,
    quick_search,
)
from servelab.advisor.wire import MeasureSettings
from servelab.convert.samples import generate_samples, load_samples, save_npz, stack
from servelab.errors import InvalidArgument
from servelab.repository import config_to_text

__all__ = ["SelectResult", "SelectSpec", "run_select"]

Progress = Callable[[str], None]
#: the time the quick search leaves per reference peer (start-up in its own environment and a rate search)
PEER_RESERVE_S = 75.0


@dataclass
class SelectSpec:
    """Everything ``servelab select`` was asked (each duration a flag)."""

    model: str
    repo: Path
    constraints: Constraints
    weights: dict[str, float]
    measure: MeasureSettings
    report_dir: Path
    name: str | None = None
    data: Path | None = None
    random_inputs: bool = False
    targets: tuple[str, ...] = ("onnx", "openvino", "torchscript")
    precisions: tuple[str, ...] = ("fp32", "fp16", "int8")
    batchings: tuple[Batching, ...] = (Batching(), Batching(8, 200), Batching(32, 1000))
    instances: tuple[int, ...] = (1, 2)
    threads: tuple[int, ...] = (1, 2)
    front_doors: tuple[str, ...] = ("rest", "grpc")
    peers: tuple[str, ...] = ("torchserve", "mlserver", "triton")
    peers_dir: Path = Path(".peers")
    budget_fraction: float = 0.25
    #: wall-clock budget of the whole command; the quick search stops early to keep within it (not --exhaustive)
    time_budget_s: float | None = 720.0
    keep_runtimes: int = 3
    inprocess_s: float = 0.5
    exhaustive: bool = False
    qualitative: Path | None = None
    convert_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.data is None and not self.random_inputs:
            raise InvalidArgument("give --data FILE (real input samples), or --random-inputs to measure on random data")
        if not 0 < self.budget_fraction <= 1:
            raise InvalidArgument(f"--budget must be in (0, 1], got {self.budget_fraction}")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise InvalidArgument(f"--time-budget-min must be > 0, got {self.time_budget_s / 60:g}")
        bad = [p for p in self.peers if p not in PEERS]
        if bad:
            raise InvalidArgument(f"--peers {list(self.peers)}: expected some of {sorted(PEERS)} (or none)")


@dataclass
class SelectResult:
    spec: SelectSpec
    converted: Converted
    data_source: str
    inprocess: list[InProcessResult]
    pruned: dict[str, str]
    survivors: list[ArtefactRef]
    grid: Grid
    measured: dict[Candidate, Measured]
    peers: dict[str, PeerRun]
    decision: Decision
    log: list[str]
    probes: int
    elapsed_s: float
    config_path: Path | None = None
    config_text: str = ""
    #: what the grid left out and why (a model that does not batch: no batching dimension)
    grid_note: str = ""

    @property
    def fraction_measured(self) -> float:
        return len(self.measured) / self.grid.size if self.grid.size else 0.0

    def to_dict(self) -> dict[str, Any]:
        winner = self.decision.winner
        return {
            "model": self.converted.name, "data": self.data_source, "constraints": self.spec.constraints.__dict__,
            "weights": self.decision.weights, "grid_size": self.grid.size, "points_measured": len(self.measured),
            "fraction_measured": self.fraction_measured, "probes": self.probes, "elapsed_s": self.elapsed_s,
            "exhaustive": self.spec.exhaustive, "winner": winner.label if winner else None,
            "winner_rate": winner.max_rate if winner else None, "config_path": str(self.config_path or ""),
            "log": self.log, "pruned": self.pruned, "grid_note": self.grid_note, "batched": self.converted.batched,
            "peers": {name: {"served_as": run.served_as, "error": run.search.error} for name, run in self.peers.items()},
            "inprocess": [{"artefact": r.artefact.label, "latency_ms": r.latency_ms, "rows_per_s": r.rows_per_s,
                           "batch": r.batch, "error": r.error} for r in self.inprocess],
            "rows": [{"label": r.label, "kind": r.kind, "max_rate": r.max_rate, "p99_ms": r.p99_ms, "rss_mb": r.rss_mb,
                      "accuracy_drop": r.accuracy_drop, "score": r.score, "feasible": r.feasible, "verdict": r.verdict,
                      "confirmed": r.confirmed, "search": r.search.to_dict()} for r in self.decision.rows],
        }  # fmt: skip


def _converted(spec: SelectSpec, progress: Progress) -> Converted:
    path = Path(spec.model)
    if path.is_dir() and list(path.glob("*.convert.json")):
        return read_converted(path, spec.name)
    from servelab.convert.pipeline import ConvertSpec, convert

    out = spec.report_dir / "converted"
    conv = ConvertSpec(source=spec.model, out=out, name=spec.name, targets=spec.targets, precisions=spec.precisions,
                       data=spec.data, **spec.convert_options)  # fmt: skip
    result = convert(conv, progress)
    assert result.manifest is not None
    return read_converted(out, result.name)


def _samples(spec: SelectSpec, converted: Converted) -> tuple[str, list[dict[str, Any]]]:
    batched = converted.batched
    if spec.data is not None:
        return f"file {spec.data}", load_samples(spec.data, converted.inputs, limit=4096, batched=batched)
    if batched:
        return "random inputs (--random-inputs)", generate_samples(converted.inputs, 256, seed=7)
    if not converted.request_file.is_file():
        raise InvalidArgument(
            f"{converted.name} does not batch: it takes whole requests, which random data cannot make up; give --data "
            "(an .npz with one array per input)"
        )
    where = f"the request convert checked it on ({converted.request_file.name}; {converted.manifest.get('data', '')})"
    return where, load_samples(converted.request_file, converted.inputs, batched=False)


def _measure_settings(spec: SelectSpec, converted: Converted, samples: list[dict[str, Any]]) -> MeasureSettings:
    """Batches of the samples from a file the bench reads, or (a model that does not batch) the whole requests."""
    if converted.batched:
        return replace(spec.measure, data_path=str(save_npz(samples, spec.report_dir / "inputs.npz")))
    return replace(spec.measure, data_path=None, requests=tuple(samples[:16]), client_batch=1)


def _inprocess(spec: SelectSpec, converted: Converted, samples: list[dict[str, Any]], progress: Progress) -> list[InProcessResult]:
    feed = stack(samples[: max(a.max_batch_size for a in converted.artefacts)]) if converted.batched else samples[0]
    out: list[InProcessResult] = []
    batch = None  # chosen on the first artefact's latency, then the same for all (they compare at one batch)
    for a in converted.artefacts:
        r = measure_inprocess(a, converted.folder(a), feed, max(spec.threads), spec.inprocess_s, batch)
        batch = batch or (r.batch if r.error is None else None)
        progress(f"in process {a.label}: {r.latency_ms:.3f} ms one row, {r.rows_per_s:,.0f} rows/s at batch {r.batch}"
                 + (f" ({r.error})" if r.error else ""))  # fmt: skip
        out.append(r)
    return out


def _start_hints(
    spec: SelectSpec, converted: Converted, samples: list[dict[str, Any]], first: InProcessResult, progress: Progress
) -> StartHints:
    """Whether batching and every thread pay for the first survivor, from its in-process run and one more run
    at the fewest threads (the figure that matters: rows/s in a batch where batching pays, else one-row latency)."""
    gain = batching_gain(first.latency_ms, first.rows_per_s) if converted.batched and first.batch > 1 else None
    if min(spec.threads) == max(spec.threads):
        return StartHints(gain)
    feed = stack(samples[: first.artefact.max_batch_size]) if converted.batched else samples[0]
    few = measure_inprocess(first.artefact, converted.folder(first.artefact), feed, min(spec.threads), spec.inprocess_s,
                            first.batch)  # fmt: skip
    if few.error is not None or not few.rows_per_s > 0:
        return StartHints(gain)
    batched_start = gain is None or gain >= BATCHING_PAYS
    tgain = first.rows_per_s / few.rows_per_s if batched_start else few.latency_ms / first.latency_ms
    progress(f"in process {first.artefact.label} at {min(spec.threads)} thread(s): {few.latency_ms:.3f} ms one row, "
             f"{few.rows_per_s:,.0f} rows/s at batch {few.batch}")  # fmt: skip
    return StartHints(gain, tgain)


def _rows(converted: Converted, measured: dict[Candidate, Measured], peers: dict[str, PeerRun]) -> list[Row]:
    confirming = any(sum(s.complete for s in m.searches) > 1 for m in measured.values())
    rows = [
        Row(m.candidate.label, "candidate", m.candidate.artefact.backend, "servelab", m.candidate.front_door,
            m.candidate.artefact.precision, m.search, m.candidate.artefact.accuracy_drop, m.candidate,
            confirmed=sum(s.complete for s in m.searches) > 1 if confirming else None)
        for m in sorted(measured.values(), key=lambda m: m.order)
    ]  # fmt: skip
    for name, run in peers.items():
        label = f"{name} (reference{': ' + run.served_as if run.served_as else ''})"
        rows.append(Row(label, "reference", PEERS[name], name, "rest", "fp32", run.search))
    return rows


def _peers(spec: SelectSpec, converted: Converted, progress: Progress) -> dict[str, PeerRun]:
    if not spec.peers:
        return {}
    onnx, pt = converted.fp32_file("onnxruntime", "model.onnx"), converted.fp32_file("pytorch", "model.pt")
    max_batch = min(8, max(a.max_batch_size for a in converted.artefacts)) if converted.batched else 0
    settings = peer_settings(spec.peers_dir, converted.batched, max(spec.threads))
    runs = {}
    for p in spec.peers:
        arts = peer_artefacts(p, converted.name, converted.inputs, converted.outputs, onnx, pt, max_batch)
        runs[p] = measure_peer(p, arts, settings, spec.measure, progress)
    return runs


def _grid(spec: SelectSpec, converted: Converted, allowed: list[ArtefactRef]) -> tuple[Grid, str]:
    """The served grid; a model that does not batch has no batching dimension (said in the note)."""
    if converted.batched:
        return Grid(tuple(allowed), spec.batchings, spec.instances, spec.threads, spec.front_doors), ""
    note = (f"{converted.name} does not batch (max_batch_size 0; its inputs have leading dimensions of their own): "
            "no batching dimension in the grid; instances x threads x runtime x front door searched")  # fmt: skip
    return Grid(tuple(allowed), (Batching(),), spec.instances, spec.threads, spec.front_doors), note


def _write_winner(spec: SelectSpec, converted: Converted, winner: Row | None) -> tuple[Path | None, str]:
    if winner is None or winner.candidate is None:
        return None, ""
    folder = converted.folder(winner.candidate.artefact)
    config = candidate_config(artefact_config(folder), winner.candidate, converted.name)
    model_dir = install_model(folder, config, spec.repo)
    return model_dir / "config.pbtxt", config_to_text(config)


def run_select(spec: SelectSpec, progress: Progress | None = None) -> SelectResult:
    """Run the whole selection; the winner's config is written into ``spec.repo``."""
    say = progress or (lambda _m: None)
    started = time.perf_counter()
    spec.report_dir.mkdir(parents=True, exist_ok=True)
    converted = _converted(spec, say)
    data_source, samples = _samples(spec, converted)
    spec = replace(spec, measure=_measure_settings(spec, converted, samples))
    allowed = [a for a in converted.artefacts
               if spec.constraints.max_accuracy_drop is None or a.accuracy_drop <= spec.constraints.max_accuracy_drop]  # fmt: skip
    pruned = {a.model: f"accuracy drop {a.accuracy_drop:.3g} exceeds --max-accuracy-drop" for a in converted.artefacts if a not in allowed}
    if not allowed:
        raise InvalidArgument(f"no artefact meets --max-accuracy-drop {spec.constraints.max_accuracy_drop}: {pruned}")
    inproc = _inprocess(spec, replace(converted, artefacts=allowed), samples, say)
    survivors, why = prune(inproc, spec.keep_runtimes)
    pruned.update(why)
    if not survivors:
        raise InvalidArgument(f"no artefact ran in process: {why}")
    grid, grid_note = _grid(spec, converted, allowed)
    if grid_note:
        say(grid_note)
    measurer = Measurer(spec.measure, converted.repository, say)
    if spec.exhaustive:
        exhaustive_search(grid.points(), measurer)
        log = [f"exhaustive: every one of the {grid.size} grid points measured"]
    else:
        budget = max(1, math.floor(spec.budget_fraction * grid.size))
        deadline = None if spec.time_budget_s is None else started + spec.time_budget_s - PEER_RESERVE_S * len(spec.peers)
        hints = _start_hints(spec, converted, samples, next(r for r in inproc if r.artefact == survivors[0]), say)
        _, log = quick_search(grid, survivors, measurer, budget, deadline, hints,
                              concurrency=spec.measure.closed_concurrency)  # fmt: skip
    log = [grid_note, *log] if grid_note else log
    peers = _peers(spec, converted, say)
    rows = _rows(converted, measurer.results, peers)
    decision = decide(rows, spec.constraints, spec.weights, load_qualitative(spec.qualitative))
    config_path, config_text = _write_winner(spec, converted, decision.winner)
    result = SelectResult(spec, converted, data_source, inproc, pruned, survivors, grid, measurer.results, peers,
                          decision, log, measurer.probes, time.perf_counter() - started, config_path, config_text,
                          grid_note)  # fmt: skip
    (spec.report_dir / "select.json").write_text(json.dumps(result.to_dict(), indent=2, default=str))
    return result
