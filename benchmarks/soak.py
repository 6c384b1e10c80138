"""Soak: a long open-loop run at 70% of the measured maximum throughput, with a model reload every minute.

    python benchmarks/soak.py [--duration-s 600] [--reload-every-s 60] [--load-fraction 0.7] [--rollout]

1. Starts ``servelab serve`` on 127.0.0.1 (explicit model control, Triton's ``simple``: INT32 [1, 16]
   add/sub on ONNX Runtime, built into a temporary repository).
2. Measures the maximum throughput: a short closed-loop run (``--max-concurrency`` requests in flight)
   with servelab's own load generator (``servelab.bench.measure_level``).
3. Runs open loop at ``--load-fraction`` of that rate for ``--duration-s``, in windows of ``--window-s``
   (per-minute P50 / P99), while the same model is reloaded through the repository API every
   ``--reload-every-s`` and the server's RSS is sampled (psutil) every second.
4. Passes when no accepted request failed (every sent request answered 200, reloads included) and the
   RSS at the end is within 5% of the RSS after warm-up (``--warmup-s``).

With ``--rollout`` the model has versions 1 and 2 (the same files) and a staged canary of version 2
runs through the whole soak (steps 5, 20, 100% of ``--duration-s`` / 4 each, gates live, output
agreement on 10% of the canary's requests), so that routing, shadow copies and the gates are soaked
with the reloads; it must end promoted or still running (a rollback of an identical candidate would be
a gate firing on noise), and its history is reported.

Prints a table, writes benchmarks/results/soak.json and its own marked section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
from _examples import simple_repository
from rich.console import Console
from rich.table import Table

from servelab.bench import LevelResult, LoadSpec, TargetSpec, measure_level
from servelab.bench.net import http_status
from servelab.bench.results_md import add_results_md_options, args_for_json, write_results
from servelab.bench.serverproc import servelab_serve
from servelab.config.signals import exit_on_sigterm

HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "soak.json"
RESULTS_MD = HERE / "RESULTS.md"
SECTION = "soak"
MODEL = "simple"
RSS_GROWTH_BAR = 0.05
REQUESTS = [{"INPUT0": np.arange(16, dtype=np.int32).reshape(1, 16), "INPUT1": np.ones((1, 16), dtype=np.int32)}]


# ----- the server -----
def _build_repo(root: Path, rollout: bool) -> Path:
    repo = simple_repository(root / "repo")
    if rollout:  # version 2 beside 1, the default pinned to stable = 1 until the rollout moves it
        folder = repo / MODEL
        shutil.copytree(folder / "1", folder / "2")
        config = folder / "config.pbtxt"
        config.write_text(config.read_text() + "\nversion_policy: { all: {} }\n")
        (folder / "routing.yaml").write_text("default: stable\nlabels: {stable: 1}\n")
    return repo


def _rollout_spec(duration_s: float) -> dict[str, Any]:
    """Three steps over the soak; gates with room for the noise of two identical versions under 70% load: a
    reload stalls the event loop for every request in flight, which is a larger share of the canary's few
    samples at 5% than of stable's, so the P99 gate needs many samples (500) and some slack (25% + 5 ms)."""
    return {"candidate": "2", "steps": [5, 20, 100], "min_dwell_s": duration_s / 4, "min_requests": 100,
            "agreement_sample": 0.1, "gates": {"p99_max_increase": 0.25, "p99_slack_ms": 5.0, "min_samples": 500}}


def _rollout_call(url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    status, text = http_status(f"{url}/v2/models/{MODEL}/rollout", "POST" if data else "GET", data, timeout_s=30)
    if status != 200:
        raise SystemExit(f"rollout API answered {status}: {text[:300]!r}")
    return json.loads(text)  # type: ignore[no-any-return]


def _rollout_summary(status: dict[str, Any]) -> dict[str, Any]:
    r = status["rollout"]
    return {"status": r["status"], "step": r["step"], "percent": r["percent"], "reason": r["reason"],
            "events": [f"{h['event']}" + (f" {h['percent']:g}%" if h.get("percent") is not None else "")
                       for h in status["history"]],
            "pass": r["status"] in ("running", "promoted")}


# ----- the two phases -----
async def _max_throughput(target: TargetSpec, concurrency: int, interval_ms: int) -> float:
    load = LoadSpec(mode="concurrency", levels=(concurrency,), measurement_interval_ms=interval_ms,
                    max_windows=5, stability_percentage=10, warmup_requests=200, max_level_s=60)
    result = await measure_level(target, MODEL, REQUESTS, load, concurrency)
    failed = sum(result.errors.values())
    if failed:
        raise SystemExit(f"the throughput probe had {failed} failed requests: {dict(result.errors)}")
    return result.throughput_rps


async def _reloads(url: str, every_s: float, stop: asyncio.Event, log: list[dict[str, Any]]) -> None:
    """POST the model's load (a reload: the new copy loads, then the old one drains) every ``every_s``."""
    async with httpx.AsyncClient(timeout=120) as client:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=every_s)
                return
            except TimeoutError:
                pass
            started = time.monotonic()
            r = await client.post(f"{url}/v2/repository/models/{MODEL}/load")
            log.append({"at_s": started, "status": r.status_code, "duration_s": time.monotonic() - started})


async def _rss(pid: int, stop: asyncio.Event, samples: list[tuple[float, int]]) -> None:
    process = psutil.Process(pid)
    while not stop.is_set():
        samples.append((time.monotonic(), process.memory_info().rss))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)


async def _soak(target: TargetSpec, pid: int, url: str, rate: float, args: argparse.Namespace) -> dict[str, Any]:
    load = LoadSpec(mode="request_rate", levels=(rate,), measurement_interval_ms=int(args.window_s * 1000),
                    request_count=max(1, int(rate * args.duration_s)), warmup_requests=0,
                    max_level_s=args.duration_s * 1.5 + 60, max_inflight=256)  # below the server's 1000 cap
    stop = asyncio.Event()
    reloads: list[dict[str, Any]] = []
    rss: list[tuple[float, int]] = []
    started = time.monotonic()
    side = [asyncio.create_task(_reloads(url, args.reload_every_s, stop, reloads)),
            asyncio.create_task(_rss(pid, stop, rss))]
    try:
        result = await measure_level(target, MODEL, REQUESTS, load, rate)
    finally:
        stop.set()
        await asyncio.gather(*side)
    return _summary(result, reloads, rss, started, rate, args)


def _summary(result: LevelResult, reloads: list[dict[str, Any]], rss: list[tuple[float, int]], started: float,
             rate: float, args: argparse.Namespace) -> dict[str, Any]:
    windows, sent, errors = result.windows, result.sent, result.errors
    completed = result.summary.completed  # every request of the run (request_count): answered 200
    failed = sum(errors.values())
    warm = next((r for t, r in rss if t - started >= args.warmup_s), rss[-1][1] if rss else 0)
    end = rss[-1][1] if rss else 0
    growth = (end - warm) / warm if warm else 0.0
    rows = [{"window": i + 1, "duration_s": w.duration_s, "requests": w.completed, "rps": w.requests_per_s,
             "p50_ms": w.histogram.percentile(50) * 1e3, "p99_ms": w.histogram.percentile(99) * 1e3,
             "errors": dict(w.errors)} for i, w in enumerate(windows)]
    failed_reloads = [r for r in reloads if r["status"] != 200]
    return {
        "offered_rps": rate, "sent": sent, "completed": completed, "failed": failed, "errors": dict(errors),
        "load_generator_failures": result.failures,
        "reloads": len(reloads), "failed_reloads": len(failed_reloads),
        "reload_s": [round(r["duration_s"], 3) for r in reloads],
        "rss_after_warmup_mb": warm / 2**20, "rss_end_mb": end / 2**20, "rss_growth": growth,
        "rss_mb": [round(r / 2**20, 1) for _, r in rss[:: max(1, len(rss) // 120)]],
        "windows": rows,
        "pass": failed == 0 and not failed_reloads and not result.failures and completed == sent
        and growth < RSS_GROWTH_BAR,
    }


# ----- reporting -----
def _table(max_rps: float, soak: dict[str, Any]) -> Table:
    table = Table(title=f"soak: {soak['offered_rps']:.0f} req/s offered ({max_rps:.0f} max measured)")
    for column in ("window", "requests", "req/s", "P50 ms", "P99 ms", "errors"):
        table.add_column(column, justify="right")
    for w in soak["windows"]:
        table.add_row(str(w["window"]), str(w["requests"]), f"{w['rps']:.0f}", f"{w['p50_ms']:.2f}",
                      f"{w['p99_ms']:.2f}", str(sum(w["errors"].values())))
    return table


def results_markdown(doc: dict[str, Any]) -> str:
    s, a = doc["soak"], doc["args"]
    lines = [
        f"## Soak (`python benchmarks/soak.py --duration-s {a['duration_s']:g} --reload-every-s "
        f"{a['reload_every_s']:g}`)",
        "",
        f"`servelab serve` (explicit mode) with Triton's `simple` (ONNX INT32 [1,16] add/sub), REST binary, "
        f"batch 1. Maximum throughput measured first (closed loop, {a['max_concurrency']} in flight): "
        f"{doc['max_rps']:.0f} req/s; then open loop at {a['load_fraction']:.0%} of it "
        f"({s['offered_rps']:.0f} req/s) for {a['duration_s']:g} s, reloading the model every "
        f"{a['reload_every_s']:g} s ({s['reloads']} reloads, {s['failed_reloads']} failed); windows of "
        f"{a['window_s']:g} s. "
        f"Measured {doc['when']} on {doc['machine']}.",
        "",
        "| window | requests | req/s | P50 ms | P99 ms | errors |",
        "|---|---|---|---|---|---|",
    ]
    for w in s["windows"]:
        lines.append(f"| {w['window']} | {w['requests']} | {w['rps']:.0f} | {w['p50_ms']:.2f} | {w['p99_ms']:.2f} "
                     f"| {sum(w['errors'].values())} |")
    verdict = "PASS" if s["pass"] else "FAIL"
    rollout = doc.get("rollout")
    if rollout is not None:
        lines += ["", f"Rollout of version 2 during the soak (`--rollout`): {rollout['status']} at step {rollout['step']} "
                  f"({rollout['percent']:g}%); history: {', '.join(rollout['events'])}"
                  + (f"; reason: {rollout['reason']}" if rollout["reason"] else "") + "."]
    lines += [
        "",
        f"{verdict}: {s['sent']} sent, {s['completed']} answered 200, {s['failed']} failed (bar: 0); server RSS "
        f"{s['rss_after_warmup_mb']:.1f} MB after {a['warmup_s']:g} s of warm-up, {s['rss_end_mb']:.1f} MB at the "
        f"end: {s['rss_growth']:+.1%} (bar: under {RSS_GROWTH_BAR:.0%}). Reload times (s): "
        f"{', '.join(f'{x:.2f}' for x in s['reload_s']) or '-'}.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration-s", type=float, default=600.0, help="length of the open-loop run")
    parser.add_argument("--reload-every-s", type=float, default=60.0, help="time between model reloads")
    parser.add_argument("--window-s", type=float, default=None, help="statistics window [60, or duration/4 if shorter]")
    parser.add_argument("--warmup-s", type=float, default=None, help="RSS baseline taken after this [60, or duration/4]")
    parser.add_argument("--load-fraction", type=float, default=0.7, help="share of the measured maximum offered")
    parser.add_argument("--max-concurrency", type=int, default=32, help="requests in flight for the maximum")
    parser.add_argument("--probe-interval-ms", type=int, default=2000, help="window of the maximum-throughput probe")
    parser.add_argument("--rollout", action="store_true", help="run a staged canary of version 2 through the soak")
    parser.add_argument("--output", type=Path, default=RESULT)
    add_results_md_options(parser, SECTION, RESULTS_MD)
    args = parser.parse_args()
    args.window_s = args.window_s or min(60.0, args.duration_s / 4)
    args.warmup_s = args.warmup_s if args.warmup_s is not None else min(60.0, args.duration_s / 4)
    console = Console()
    rollout: dict[str, Any] | None = None
    flags = ("--model-control-mode", "explicit", "--load-model", MODEL, "--log-level", "warning")
    with tempfile.TemporaryDirectory() as tmp, \
            servelab_serve(_build_repo(Path(tmp), args.rollout), *flags, env={"OMP_NUM_THREADS": "1"},
                           log=Path(tmp) / "server.log", ready_timeout_s=90, stop_timeout_s=60) as server:
        assert server.ports is not None
        url = server.ports.http_url
        target = TargetSpec("oip-http", url, binary=True, server_pid=server.pid)
        max_rps = asyncio.run(_max_throughput(target, args.max_concurrency, args.probe_interval_ms))
        console.print(f"maximum throughput: {max_rps:.0f} req/s; soaking at {args.load_fraction:.0%}")
        if args.rollout:
            _rollout_call(url, _rollout_spec(args.duration_s))
        soak = asyncio.run(_soak(target, server.pid, url, max_rps * args.load_fraction, args))
        if args.rollout:
            rollout = _rollout_summary(_rollout_call(url))
    code = server.exit_code
    doc = {
        "args": args_for_json(args, HERE.parent),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "max_rps": max_rps, "soak": soak, "server_exit_code": code,
    }
    if rollout is not None:
        doc["rollout"] = rollout
    console.print(_table(max_rps, soak))
    console.print(results_markdown(doc).splitlines()[-1])
    write_results(doc, args.output, args.results_md, SECTION, results_markdown)
    # a missed bar is the FAIL its section states; the step itself fails only when it could not measure
    # (the SystemExit messages above), so one FAIL does not stop `make bench` before the other tables


if __name__ == "__main__":
    exit_on_sigterm()  # a SIGTERM (a timeout) still stops the servers this script started
    main()
