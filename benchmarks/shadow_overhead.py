"""Shadow overhead: does copying every request to a candidate cost the primary anything?

    python benchmarks/shadow_overhead.py [--rounds 5] [--round-s 20] [--load-fraction 0.3]

One `servelab serve` (127.0.0.1) serves Triton's ``simple`` (ONNX INT32 [1, 16] add/sub) twice, from the
same files, with versions 1 and 2: ``plain`` routes every request to version 1; ``shadowed`` does the
same and copies every request (``shadow: {version: 2, sample: 1.0}``) to version 2, on the shadow
executor (``--shadow-threads`` threads, at most ``--shadow-queue`` copies waiting or running). In that one run:

1. the maximum throughput of ``plain`` (closed loop, ``--max-concurrency`` in flight);
2. open loop at ``--load-fraction`` of it, ``--rounds`` alternating rounds of ``plain`` and ``shadowed``
   (``--round-s`` each): the primary's P99 with every request shadowed against shadowing off (median
   round of each), and how many copies were compared (should be all of them);
3. past saturation (closed loop, ``--saturation-concurrency`` in flight, ``--saturation-s``) on
   ``shadowed``: copies are shed (counted by the server) and every primary request is answered 200.

Passes when the shadowed P99 is within 5% of the plain P99 and, past saturation, copies were shed and no
primary request failed. Prints a table, writes benchmarks/results/shadow_overhead.json and its section of
benchmarks/RESULTS.md. Figures are only meaningful on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _examples import simple_repository
from rich.console import Console
from rich.table import Table

from servelab.bench import LevelResult, LoadSpec, TargetSpec, measure_level
from servelab.bench.net import http_status
from servelab.bench.peers.servelab_target import ServelabPeer
from servelab.bench.results_md import add_results_md_options, args_for_json, write_results
from servelab.config.signals import exit_on_sigterm

HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "shadow_overhead.json"
RESULTS_MD = HERE / "RESULTS.md"
SECTION = "shadow_overhead"
PLAIN, SHADOWED = "plain", "shadowed"
P99_BAR = 1.05
REQUESTS = [{"INPUT0": np.arange(16, dtype=np.int32).reshape(1, 16), "INPUT1": np.ones((1, 16), dtype=np.int32)}]


# ----- the server -----
def _build_repo(root: Path) -> Path:
    built = simple_repository(root / "built")
    repo = root / "repo"
    for name, policy in ((PLAIN, 'default: "1"\n'), (SHADOWED, 'default: "1"\nshadow: {version: 2, sample: 1.0}\n')):
        folder = repo / name
        shutil.copytree(built / "simple", folder)
        shutil.copytree(folder / "1", folder / "2")
        config = folder / "config.pbtxt"
        text = config.read_text().replace('name: "simple"', f'name: "{name}"')
        config.write_text(text + "\nversion_policy: { all: {} }\n")
        (folder / "routing.yaml").write_text(policy)
    return repo


def _server_args(tmp: Path, args: argparse.Namespace) -> tuple[str, ...]:
    """Both models loaded; the shadow budget (threads, copies waiting or running) from a settings file."""
    settings = tmp / "settings.json"
    settings.write_text(json.dumps({"routing": {"shadow_threads": args.shadow_threads, "shadow_queue": args.shadow_queue}}))
    return ("--load-model", SHADOWED, "--settings", str(settings))


def _shadow_counts(url: str) -> dict[str, int]:
    """compared / failed / shed copies of ``shadowed`` so far (the server's own count)."""
    status, body = http_status(f"{url}/v2/models/{SHADOWED}/rollout", timeout_s=30)
    if status != 200:
        raise SystemExit(f"rollout status of {SHADOWED} answered {status}: {body[:300]!r}")
    shadow = json.loads(body)["shadow"]
    return {k: int(shadow[k]) for k in ("compared", "failed", "shed")}


# ----- the three phases -----
async def _closed(target: TargetSpec, model: str, concurrency: int, interval_ms: int, max_windows: int) -> LevelResult:
    load = LoadSpec(mode="concurrency", levels=(concurrency,), measurement_interval_ms=interval_ms,
                    max_windows=max_windows, stability_percentage=10, warmup_requests=200, max_level_s=120)
    return await measure_level(target, model, REQUESTS, load, concurrency)


async def _open_round(target: TargetSpec, model: str, rate: float, round_s: float) -> LevelResult:
    load = LoadSpec(mode="request_rate", levels=(rate,), measurement_interval_ms=int(round_s * 1000),
                    request_count=max(1, int(rate * round_s)), warmup_requests=0, max_level_s=round_s * 3 + 30,
                    max_inflight=256)
    return await measure_level(target, model, REQUESTS, load, rate)


def _round_row(model: str, index: int, result: LevelResult, counts: dict[str, int] | None) -> dict[str, Any]:
    summary = result.summary
    return {"model": model, "round": index, "sent": result.sent, "completed": summary.completed,
            "errors": sum(result.errors.values()), "rps": summary.requests_per_s,
            "p50_ms": summary.histogram.percentile(50) * 1e3, "p99_ms": summary.histogram.percentile(99) * 1e3,
            "copies": counts}


async def _alternating(target: TargetSpec, url: str, rate: float, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for index in range(args.rounds):
        order = (PLAIN, SHADOWED) if index % 2 == 0 else (SHADOWED, PLAIN)  # neither always goes first
        for model in order:
            before = _shadow_counts(url)
            result = await _open_round(target, model, rate, args.round_s)
            after = _shadow_counts(url)
            counts = {k: after[k] - before[k] for k in after} if model == SHADOWED else None
            rows.append(_round_row(model, index + 1, result, counts))
    return rows


async def _saturated(target: TargetSpec, url: str, max_rps: float, args: argparse.Namespace) -> dict[str, Any]:
    """A fixed number of requests (about ``saturation_s`` at the maximum), so that every one is counted."""
    before = _shadow_counts(url)
    count = max(args.saturation_concurrency, int(max_rps * args.saturation_s))
    load = LoadSpec(mode="concurrency", levels=(args.saturation_concurrency,), request_count=count,
                    measurement_interval_ms=int(args.saturation_s * 1000), warmup_requests=0,
                    max_level_s=args.saturation_s * 4 + 60)
    result = await measure_level(target, SHADOWED, REQUESTS, load, args.saturation_concurrency)
    await asyncio.sleep(2.0)  # copies still in the shadow threads finish (they are counted when they do)
    after = _shadow_counts(url)
    counts = {k: after[k] - before[k] for k in after}
    row = _round_row(SHADOWED, 0, result, counts)
    row["concurrency"] = args.saturation_concurrency
    row["load_generator_failures"] = result.failures
    return row


def _summary(max_rps: float, rate: float, rounds: list[dict[str, Any]], saturated: dict[str, Any]) -> dict[str, Any]:
    p99 = {m: statistics.median(r["p99_ms"] for r in rounds if r["model"] == m) for m in (PLAIN, SHADOWED)}
    p50 = {m: statistics.median(r["p50_ms"] for r in rounds if r["model"] == m) for m in (PLAIN, SHADOWED)}
    shadowed = [r for r in rounds if r["model"] == SHADOWED]
    copies = {k: sum(r["copies"][k] for r in shadowed) for k in ("compared", "failed", "shed")}
    ratio = p99[SHADOWED] / p99[PLAIN] if p99[PLAIN] else float("inf")
    lost = saturated["errors"] + (saturated["sent"] - saturated["completed"]) + len(saturated["load_generator_failures"])
    errors = sum(r["errors"] for r in rounds)
    return {
        "max_rps": max_rps, "offered_rps": rate, "p99_ms": p99, "p50_ms": p50, "p99_ratio": ratio,
        "copies_at_load": copies, "sent_shadowed_at_load": sum(r["sent"] for r in shadowed), "errors_at_load": errors,
        "saturated": saturated, "primary_lost_past_saturation": lost,
        "pass": ratio <= P99_BAR and errors == 0 and saturated["copies"]["shed"] > 0 and lost == 0,
    }


# ----- reporting -----
def _table(doc: dict[str, Any]) -> Table:
    table = Table(title=f"shadow overhead at {doc['result']['offered_rps']:.0f} req/s ({doc['result']['max_rps']:.0f} max)")
    for column in ("round", "model", "sent", "errors", "req/s", "P50 ms", "P99 ms", "compared", "shed"):
        table.add_column(column, justify="right")
    for r in doc["rounds"]:
        copies = r["copies"] or {}
        table.add_row(str(r["round"]), r["model"], str(r["sent"]), str(r["errors"]), f"{r['rps']:.0f}",
                      f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}", str(copies.get("compared", "-")),
                      str(copies.get("shed", "-")))
    return table


def results_markdown(doc: dict[str, Any]) -> str:
    s, a = doc["result"], doc["args"]
    sat = s["saturated"]
    lines = [
        f"## Shadow overhead (`python benchmarks/shadow_overhead.py --rounds {a['rounds']} --round-s {a['round_s']:g}`)",
        "",
        "`servelab serve` with Triton's `simple` (ONNX INT32 [1,16] add/sub) as two models from the same files: "
        "`plain` serves version 1; `shadowed` serves version 1 and copies every request to version 2 on the shadow "
        f"executor ({a['shadow_threads']} threads, at most {a['shadow_queue']} copies waiting or running). "
        f"Maximum throughput of `plain` (closed loop, {a['max_concurrency']} in flight): {s['max_rps']:.0f} "
        f"req/s; then open loop at {a['load_fraction']:.0%} of it ({s['offered_rps']:.0f} req/s), {a['rounds']} "
        f"alternating rounds of {a['round_s']:g} s per model; REST binary, batch 1. Measured {doc['when']} on "
        f"{doc['machine']}.",
        "",
        "| round | model | sent | errors | req/s | P50 ms | P99 ms | copies compared | copies shed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rounds"]:
        copies = r["copies"] or {}
        lines.append(f"| {r['round']} | {r['model']} | {r['sent']} | {r['errors']} | {r['rps']:.0f} | "
                     f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {copies.get('compared', '-')} | {copies.get('shed', '-')} |")
    verdict = "PASS" if s["pass"] else "FAIL"
    lines += [
        "",
        f"Median round: P99 {s['p99_ms'][PLAIN]:.2f} ms plain, {s['p99_ms'][SHADOWED]:.2f} ms shadowed: ratio "
        f"{s['p99_ratio']:.3f} (bar: at most {P99_BAR:.2f}); {s['copies_at_load']['compared']} of "
        f"{s['sent_shadowed_at_load']} shadowed requests compared, {s['copies_at_load']['shed']} shed. Past saturation "
        f"({sat['concurrency']} in flight on `shadowed`, {sat['rps']:.0f} req/s): {sat['copies']['shed']} copies shed, "
        f"{sat['copies']['compared']} compared; {sat['sent']} primary requests sent, {sat['completed']} answered 200, "
        f"{s['primary_lost_past_saturation']} lost (bar: 0). {verdict}.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per model at the fixed load")
    parser.add_argument("--round-s", type=float, default=20.0, help="length of one round")
    parser.add_argument("--load-fraction", type=float, default=0.3, help="share of the measured maximum offered")
    parser.add_argument("--max-concurrency", type=int, default=32, help="requests in flight for the maximum")
    parser.add_argument("--probe-interval-ms", type=int, default=2000, help="window of the maximum-throughput probe")
    parser.add_argument("--probe-windows", type=int, default=5, help="most windows of the maximum-throughput probe")
    parser.add_argument("--saturation-concurrency", type=int, default=256, help="requests in flight past saturation")
    parser.add_argument("--saturation-s", type=float, default=15.0, help="length of the saturated run")
    parser.add_argument("--shadow-threads", type=int, default=2, help="server setting routing.shadow_threads")
    parser.add_argument("--shadow-queue", type=int, default=64, help="server setting routing.shadow_queue (copies "
                        "waiting or running; past it they are shed)")
    parser.add_argument("--output", type=Path, default=RESULT)
    add_results_md_options(parser, SECTION, RESULTS_MD)
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory() as tmp, \
            ServelabPeer(_build_repo(Path(tmp)), PLAIN, Path(tmp) / "work", extra_args=_server_args(Path(tmp), args)) as peer:
        endpoint = peer.start()
        url = endpoint.url
        target = TargetSpec("oip-http", url, binary=True, server_pid=endpoint.pid)
        probe = asyncio.run(_closed(target, PLAIN, args.max_concurrency, args.probe_interval_ms, args.probe_windows))
        max_rps = probe.throughput_rps
        rate = max_rps * args.load_fraction
        console.print(f"maximum throughput: {max_rps:.0f} req/s; rounds at {rate:.0f} req/s")
        rounds = asyncio.run(_alternating(target, url, rate, args))
        saturated = asyncio.run(_saturated(target, url, max_rps, args))
    doc = {
        "args": args_for_json(args, HERE.parent),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "rounds": rounds, "result": _summary(max_rps, rate, rounds, saturated),
    }
    console.print(_table(doc))
    console.print(results_markdown(doc).splitlines()[-1])
    write_results(doc, args.output, args.results_md, SECTION, results_markdown)
    # a missed bar is the FAIL its section (printed above) states, not a failed step: make bench goes on


if __name__ == "__main__":
    exit_on_sigterm()  # a SIGTERM (a timeout) still stops the servers this script started
    main()
