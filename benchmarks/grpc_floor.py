"""Where servelab's gRPC time goes: servelab's gRPC front door against the floor of Python on grpcio.

    python benchmarks/grpc_floor.py [--rounds 2] [--concurrency 1,4,16] [--no-triton]

Issue #14 asks servelab's gRPC for >= 0.8x the real Triton's throughput on Triton's add_sub over perf_analyzer.
This asks first whether that bar can be met on grpcio at all: ``benchmarks/_grpc_floor_server.py`` answers
add_sub with grpcio and numpy and nothing else (``floor-aio``: grpc.aio on asyncio's loop; ``floor-uvloop``: the
same on uvloop, as servelab's front door runs; ``floor-sync``: grpcio's thread-pool server), and perf_analyzer 2.40 measures it beside ``servelab serve``
(the python model inline on the event loop, as vs_triton's ``inline`` mode) and Triton 2.51 (python backend),
every server up for the whole run, each cell on each server back to back, the order reversed on odd rounds;
the median round by throughput stands. ``servelab / floor-uvloop`` is what servelab adds on top of grpc.aio;
``floor-uvloop / Triton`` is the most a grpc.aio server could reach. Writes benchmarks/results/grpc_floor.json
and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from vs_triton import _int_list, _median, inline_copy  # noqa: E402

RESULTS = HERE / "results" / "grpc_floor.json"
RESULTS_MD = HERE / "RESULTS.md"
SECTION = "grpc_floor"
MODEL = "add_sub"
#: floor server name -> its _grpc_floor_server.py arguments (servelab serve runs grpc.aio on uvloop)
FLOORS = {"floor-aio": ("--mode", "aio"), "floor-uvloop": ("--mode", "aio", "--loop", "uvloop"),
          "floor-sync": ("--mode", "sync")}  # fmt: skip


@contextmanager
def _floor(name: str, say: Any) -> Iterator[tuple[str, int]]:
    """One floor server (its own process); yields (host:port, pid)."""
    proc = subprocess.Popen([sys.executable, str(HERE / "_grpc_floor_server.py"), *FLOORS[name]],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("port "):
            raise RuntimeError(f"the {name} server did not start (it printed {line!r})")
        say(f"{name} on port {line.split()[1]} (pid {proc.pid})")
        yield f"127.0.0.1:{line.split()[1]}", proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def _servers(repo: Path, peers_dir: Path, triton: bool, say: Any) -> Iterator[dict[str, tuple[str, int | None]]]:
    """server name -> (gRPC host:port, pid) for the floors, servelab (inline add_sub) and Triton."""
    from servelab.bench.peers.servelab_target import ServelabPeer
    from servelab.bench.peers.triton import TritonPeer

    with ExitStack() as stack:
        out: dict[str, tuple[str, int | None]] = {}
        for name in FLOORS:
            out[name] = stack.enter_context(_floor(name, say))
        inline = inline_copy(repo, repo.parent / "models-inline")
        ep = stack.enter_context(ServelabPeer(inline, MODEL, progress=say)).start()
        out["servelab"] = (ep.extra["grpc"], ep.pid)
        if triton:
            peer = stack.enter_context(TritonPeer(peers_dir, progress=say))
            peer.install()
            peer.add_python_model(repo / MODEL)
            ep = peer.start()
            out["triton"] = (ep.extra["grpc"], ep.pid)
        yield out


def measure(args: argparse.Namespace, say: Any) -> list[dict[str, Any]]:
    sys.path.insert(0, str(ROOT / "examples" / "triton_models"))
    from build_triton_models import build

    from servelab.bench.perf_analyzer import PerfAnalyzer, PerfAnalyzerOptions
    from servelab.bench.specs import InputSpec, LoadSpec, TargetSpec

    pa = PerfAnalyzer(args.peers_dir, say, PerfAnalyzerOptions(percentile=99))
    pa.ensure()
    load = LoadSpec(measurement_interval_ms=args.measurement_interval_ms, stability_percentage=10.0,
                    max_windows=args.max_trials, max_level_s=args.max_trials * args.measurement_interval_ms / 1e3 + 60)  # fmt: skip
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="servelab-grpc-floor-") as tmp:
        repo = build(Path(tmp) / "models")
        with _servers(repo, args.peers_dir, args.triton, say) as servers:
            names = list(servers)
            time.sleep(1.0)
            for rnd in range(args.rounds):
                for conc in args.concurrency:
                    for name in names if rnd % 2 == 0 else names[::-1]:
                        url, pid = servers[name]
                        level, rep = pa.measure_level(TargetSpec("oip-grpc", url, server_pid=pid), MODEL, load,
                                                      InputSpec(), float(conc))  # fmt: skip
                        run = {"round": rnd, "server": name, "concurrency": conc, "ok": rep is not None,
                               **(rep.to_dict() if rep is not None else {"failure": (level.failures or ["no report"])[0]})}  # fmt: skip
                        print(json.dumps(run), flush=True)
                        runs.append(run)
    return runs


def rows_of(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    servers = list(dict.fromkeys(r["server"] for r in runs))
    rows = []
    for conc in dict.fromkeys(r["concurrency"] for r in runs):
        cells = {s: _median([r for r in runs if r["server"] == s and r["concurrency"] == conc]) for s in servers}
        rows.append({"concurrency": conc, "cells": cells,
                     "failures": {s: sum(1 for r in runs if r["server"] == s and r["concurrency"] == conc and not r["ok"])
                                  for s in servers}})  # fmt: skip
    return rows


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    return "-" if a is None or b is None else f"{a['inferences_per_s'] / b['inferences_per_s']:.2f}x"


def results_markdown(doc: dict[str, Any]) -> str:
    from servelab.bench.results_md import markdown_table

    s = doc["settings"]
    servers = list(doc["rows"][0]["cells"]) if doc["rows"] else []
    head = (f"perf_analyzer {doc['perf_analyzer']} over gRPC on Triton's add_sub, every server up for the whole run, each "
            f"concurrency measured on each server back to back in each of {s['rounds']} rounds (order reversed on odd "
            f"rounds), windows of {s['measurement_interval_ms']} ms stable within 10% (P99), median round by "
            f"throughput. `floor-aio` / `floor-uvloop` / `floor-sync`: benchmarks/_grpc_floor_server.py, add_sub on grpc.aio (asyncio's loop / uvloop) / grpcio's "
            f"thread pool with nothing else (no repository, scheduler or statistics); `servelab`: `servelab serve` with "
            f"add_sub inline on the event loop (vs_triton's inline mode); `triton`: Triton {doc['triton']}, python backend.\n\n")  # fmt: skip
    columns = ("c", *(f"{srv} infer/s (P99 us)" for srv in servers), "servelab / floor-uvloop",
               "floor-uvloop / triton", "servelab / triton")  # fmt: skip
    cells = []
    for r in doc["rows"]:
        c = r["cells"]
        figs = ["-" if c[srv] is None else f"{c[srv]['inferences_per_s']:,.0f} ({c[srv]['p99_us']:,.0f})" for srv in servers]
        cells.append((r["concurrency"], *figs, _ratio(c.get("servelab"), c.get("floor-uvloop")),
                      _ratio(c.get("floor-uvloop"), c.get("triton")), _ratio(c.get("servelab"), c.get("triton"))))  # fmt: skip
    failed = [f"- c={r['concurrency']} {srv}: {n} round(s) not stable" for r in doc["rows"] for srv, n in r["failures"].items() if n]
    return head + markdown_table(columns, cells) + ("\n" + "\n".join(failed) + "\n" if failed else "")


def main() -> None:
    from servelab.bench.results_md import add_results_md_options, write_results

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--measurement-interval-ms", type=int, default=2000, help="perf_analyzer -p")
    parser.add_argument("--max-trials", type=int, default=10, help="perf_analyzer -r (windows per cell, >= 3)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=_int_list, default=[1, 4, 16])
    parser.add_argument("--no-triton", dest="triton", action="store_false", help="leave the real Triton out")
    parser.add_argument("--peers-dir", type=Path, default=ROOT / ".peers")
    parser.add_argument("--out", type=Path, default=RESULTS)
    add_results_md_options(parser, SECTION, RESULTS_MD)
    args = parser.parse_args()
    if args.rounds < 1 or args.max_trials < 3 or not args.concurrency:
        parser.error("--rounds must be >= 1, --max-trials >= 3, --concurrency non-empty")
    from servelab.bench.peers._triton_install import TRITON_VERSION
    from servelab.bench.perf_analyzer import PA_VERSION

    runs = measure(args, lambda m: print(m, file=sys.stderr, flush=True))
    doc = {
        "benchmark": SECTION,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "triton": TRITON_VERSION, "perf_analyzer": PA_VERSION,
        "settings": {"measurement_interval_ms": args.measurement_interval_ms, "max_trials": args.max_trials,
                     "rounds": args.rounds, "concurrency": args.concurrency, "triton": args.triton},
        "rows": rows_of(runs), "runs": runs,
    }  # fmt: skip
    print(results_markdown(doc))
    write_results(doc, args.out, args.results_md, SECTION, results_markdown)


if __name__ == "__main__":
    from servelab.config.signals import exit_on_sigterm

    exit_on_sigterm()  # a SIGTERM (a timeout) still stops the servers this script started
    main()
