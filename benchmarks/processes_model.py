"""How ``servelab serve --processes N`` should scale past this 2-core machine: a model built from measured costs.

Inputs, all from benchmarks/results/vs_triton.json (the same run's perf_analyzer figures on add_sub, inline):

- ``mu``: what one server process serves when its event loop is saturated (mode ``inline``, the highest of
  c=4 and c=16), per protocol; its inverse is the loop's CPU time per request;
- ``curve``: the share of ``mu`` one process serves at each measured concurrency (c=1, 4, 16), interpolated
  between them (0 at 0): how busy k connections keep a process. HTTP: a connection is one concurrent request;
  gRPC: a connection carries ``GRPC_CALLS_PER_CONNECTION`` concurrent calls (perf_analyzer puts up to ~6 on
  one), so k connections are 4k calls;
- ``two``: mode ``inline2`` (2 processes) over ``inline`` at c=16: the scaling measured here, on 2 cores that
  perf_analyzer shares.

The kernel hands each new connection to one of the N listening processes by a hash of its addresses: with K
connections some processes get several and some none. A Monte-Carlo draw of that spread (``--draws`` per cell)
gives the expected number of busy processes, and the projection ``mu x sum_i curve(k_i)`` assumes a
core per process and clients elsewhere (the 2-core figure above is lower because they are not). Memory: each
process loads its own instances, so RSS grows as N x one process's (``server_rss_mb`` of the same run).
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import random
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "processes_model.json"
RESULTS_MD = HERE / "RESULTS.md"
VS_TRITON = HERE / "results" / "vs_triton.json"
SECTION = "processes_model"
PROCESSES = (1, 2, 4, 8, 16, 32, 64)
CONNECTIONS_PER_PROCESS = (1, 4, 16)
#: concurrent calls a gRPC client puts on one connection in the projection (perf_analyzer: up to ~6)
GRPC_CALLS_PER_CONNECTION = 4


def _cells(doc: dict[str, Any], mode: str, protocol: str) -> dict[int, dict[str, Any]]:
    return {r["concurrency"]: r for r in doc["rows"]
            if r["model"] == "add_sub" and r["mode"] == mode and r["protocol"] == protocol and r.get("servelab")}


def measured(doc: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per protocol: mu, curve, two (see the module's text) and rss_mb, from a vs_triton document."""
    out: dict[str, dict[str, float]] = {}
    for protocol in ("http", "grpc"):
        one, two = _cells(doc, "inline", protocol), _cells(doc, "inline2", protocol)
        rates = {c: float(r["servelab"]["inferences_per_s"]) for c, r in one.items()}
        if not rates:
            raise ValueError(f"{VS_TRITON.name} has no inline add_sub {protocol} cell: run vs_triton.py first")
        mu = max(rates.values())
        curve = [[0.0, 0.0], *([float(c), rates[c] / mu] for c in sorted(rates))]
        top = max(rates)
        scale = (float(two[top]["servelab"]["inferences_per_s"]) / rates[top]) if top in two else float("nan")
        runs = [r for r in doc["runs"] if r["server"] == "servelab-inline" and r.get("server_rss_mb")]
        rss = max(r["server_rss_mb"] for r in runs) if runs else float("nan")
        out[protocol] = {"mu": mu, "curve": curve, "two": scale, "rss_mb": rss,  # type: ignore[dict-item]
                         "cpu_us_per_request": 1e6 / mu}
    return out


def share(curve: list[list[float]], concurrency: float) -> float:
    """The measured share of a saturated process's rate at ``concurrency``, linear between the points,
    flat past the last one."""
    for (c0, s0), (c1, s1) in itertools.pairwise(curve):
        if concurrency <= c1:
            return s0 + (s1 - s0) * (concurrency - c0) / (c1 - c0)
    return curve[-1][1]


def busy(processes: int, connections: int, curve: list[list[float]], calls_per_connection: int, draws: int,
         rng: random.Random) -> float:
    """Expected sum over processes of curve(calls it got), connections spread at random."""
    total = 0.0
    for _ in range(draws):
        counts = [0] * processes
        for _ in range(connections):
            counts[rng.randrange(processes)] += 1
        total += sum(share(curve, k * calls_per_connection) for k in counts)
    return total / draws


def project(inputs: dict[str, dict[str, float]], draws: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for n in PROCESSES:
        for per in CONNECTIONS_PER_PROCESS:
            k = n * per
            row: dict[str, Any] = {"processes": n, "connections": k}
            for protocol, m in inputs.items():
                calls = GRPC_CALLS_PER_CONNECTION if protocol == "grpc" else 1
                b = busy(n, k, m["curve"], calls, draws, rng)
                row[protocol] = {"busy_processes": b, "infer_per_s": b * m["mu"]}
            row["rss_mb"] = n * inputs["http"]["rss_mb"]
            rows.append(row)
    return rows


def _curve(m: dict[str, Any]) -> str:
    return ", ".join(f"c={c:.0f}: {s:.2f}" for c, s in m["curve"][1:]) + " of that"


def results_markdown(doc: dict[str, Any]) -> str:
    m = doc["measured"]
    lines = [
        f"A projection, not a measurement: `benchmarks/processes_model.py` from the `vs_triton` run's add_sub inline "
        f"figures ({doc['source']}): one process saturated serves {m['http']['mu']:,.0f} infer/s over HTTP "
        f"({m['http']['cpu_us_per_request']:.0f} us of its loop per request; {_curve(m['http'])}) and "
        f"{m['grpc']['mu']:,.0f} over gRPC ({m['grpc']['cpu_us_per_request']:.0f} us; {_curve(m['grpc'])}; "
        f"{GRPC_CALLS_PER_CONNECTION} calls per connection); measured here "
        f"2 processes serve {m['http']['two']:.2f}x (HTTP) / {m['grpc']['two']:.2f}x (gRPC) of one at c=16 on 2 "
        f"cores shared with perf_analyzer. Connections spread over the processes at random ({doc['draws']} draws "
        f"per cell); a core per process, clients elsewhere; RSS = N x one process ({m['http']['rss_mb']:.0f} MB).",
        "",
        "| processes (cores) | connections | HTTP busy processes | HTTP infer/s | gRPC busy processes | gRPC infer/s | RSS MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        lines.append(f"| {r['processes']} | {r['connections']} | {r['http']['busy_processes']:.1f} | "
                     f"{r['http']['infer_per_s']:,.0f} | {r['grpc']['busy_processes']:.1f} | "
                     f"{r['grpc']['infer_per_s']:,.0f} | {r['rss_mb']:,.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    from servelab.bench.results_md import add_results_md_options, write_results

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vs-triton", type=Path, default=VS_TRITON, help="the vs_triton.py JSON to read")
    parser.add_argument("--draws", type=int, default=200, help="random spreads of connections per cell")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--out", type=Path, default=RESULTS)
    add_results_md_options(parser, SECTION, RESULTS_MD)
    args = parser.parse_args()
    if args.draws < 1:
        parser.error("--draws must be >= 1")
    source = json.loads(args.vs_triton.read_text())
    inputs = measured(source)
    doc = {
        "benchmark": "processes_model", "machine": {"python": platform.python_version()},
        "source": f"{args.vs_triton.name}, perf_analyzer {source.get('perf_analyzer')}",
        "draws": args.draws, "seed": args.seed, "measured": inputs, "rows": project(inputs, args.draws, args.seed),
    }
    print(results_markdown(doc))
    write_results(doc, args.out, args.results_md, SECTION, results_markdown)


if __name__ == "__main__":
    sys.exit(main())
