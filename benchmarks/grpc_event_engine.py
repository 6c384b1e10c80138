"""What grpcio's EventEngine costs a unary call: a do-nothing ``ServerLive`` between two processes.

    python benchmarks/grpc_event_engine.py [--calls 3000] [--rounds 3]

Two ``servelab serve`` processes on an empty repository, one with grpcio's defaults (``GRPC_EXPERIMENTS=""``)
and one with its EventEngine listener off (servelab's default, servelab.config.grpc_runtime); against each,
a client process with grpcio's defaults and one with the EventEngine client off. Each client makes
``--calls`` sequential calls after a warm-up; the four combinations run in alternating rounds and the median
round's P50 is kept, so machine noise hits them alike. The ratio is against defaults on both sides, measured
in the same run. Writes benchmarks/results/grpc_event_engine.json and its section of benchmarks/RESULTS.md.
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
RESULTS = HERE / "results" / "grpc_event_engine.json"
RESULTS_MD = HERE / "RESULTS.md"
SECTION = "grpc_event_engine"  # the section of RESULTS_MD this script writes
#: label -> GRPC_EXPERIMENTS for that process ("" keeps grpcio's defaults: grpc_runtime leaves it alone)
SERVERS = {"defaults": "", "listener off": "-event_engine_listener"}
CLIENTS = {"defaults": "", "client off": "-event_engine_client"}


def _client(address: str, calls: int, warmup: int) -> dict[str, float]:
    """Runs in the client process: sequential ServerLive calls, latency percentiles in microseconds."""
    import grpc
    import numpy as np

    from servelab.protocol import grpc_service_pb2 as pb
    from servelab.protocol import grpc_service_pb2_grpc as pbg

    with grpc.insecure_channel(address) as channel:
        live = pbg.GRPCInferenceServiceStub(channel).ServerLive
        request = pb.ServerLiveRequest()
        for _ in range(warmup):
            live(request)
        ns = np.empty(calls, dtype=np.int64)
        for i in range(calls):
            t0 = time.perf_counter_ns()
            live(request)
            ns[i] = time.perf_counter_ns() - t0
    us = ns / 1e3
    return {"p50_us": float(np.percentile(us, 50)), "p99_us": float(np.percentile(us, 99)), "calls": calls}


@contextmanager
def _server(repo: Path, experiments: str, log: Path) -> Iterator[str]:
    """``servelab serve`` with the given GRPC_EXPERIMENTS; yields its gRPC address once ready."""
    from servelab.bench.serverproc import servelab_serve

    with servelab_serve(repo, "--log-level", "warning", env={"GRPC_EXPERIMENTS": experiments}, log=log) as server:
        assert server.ports is not None
        yield server.ports.grpc_address


def _run_client(address: str, experiments: str, calls: int, warmup: int) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--client", address, "--calls", str(calls), "--warmup", str(warmup)]
    env = {**os.environ, "GRPC_EXPERIMENTS": experiments}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(calls: int, warmup: int, rounds: int) -> list[dict[str, Any]]:
    """Every (server, client) setting in alternating rounds; the median round by P50 of each."""
    samples: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="servelab-grpc-ee-") as tmp, ExitStack() as stack:
        (Path(tmp) / "repo").mkdir()
        addresses = {
            name: stack.enter_context(_server(Path(tmp) / "repo", env, Path(tmp) / f"server-{i}.log"))
            for i, (name, env) in enumerate(SERVERS.items())
        }
        for rnd in range(rounds):
            for server, address in addresses.items():
                for client, env in CLIENTS.items():
                    got = _run_client(address, env, calls, warmup)
                    print(json.dumps({"round": rnd, "server": server, "client": client, **got}), flush=True)
                    samples.setdefault((server, client), []).append(got)
    rows = []
    for (server, client), runs in samples.items():
        runs.sort(key=lambda r: r["p50_us"])
        mid = runs[len(runs) // 2]
        rows.append({"server": server, "client": client, **mid, "rounds_p50_us": [r["p50_us"] for r in runs]})
    base = next(r for r in rows if r["server"] == "defaults" and r["client"] == "defaults")
    for r in rows:
        r["speedup_p50"] = base["p50_us"] / r["p50_us"]
    return rows


def results_markdown(doc: dict[str, Any]) -> str:
    """This run's section of RESULTS.md, from the document written to JSON."""
    from servelab.bench.results_md import markdown_table

    head = (
        f"`ServerLive` over gRPC between two processes, {doc['calls']:,} sequential calls per cell, median of "
        f"{doc['rounds']} alternating rounds; `x defaults` is defaults' P50 / this P50 (higher is faster).\n\n"
    )
    columns = ("server (GRPC_EXPERIMENTS)", "client (GRPC_EXPERIMENTS)", "P50 us", "P99 us", "x defaults (P50)")
    def setting(label: str, value: str) -> str:
        return f"{label} (`{value}`)" if value else f'{label} (`""`)'

    cells = [
        (setting(r["server"], SERVERS[r["server"]]), setting(r["client"], CLIENTS[r["client"]]),
         f"{r['p50_us']:.0f}", f"{r['p99_us']:.0f}", f"{r['speedup_p50']:.2f}")
        for r in doc["rows"]
    ]  # fmt: skip
    return head + markdown_table(columns, cells)


def main() -> None:
    from servelab.bench.results_md import add_results_md_options, write_results

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000, help="timed calls per client run")
    parser.add_argument("--warmup", type=int, default=300, help="untimed calls before them")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    add_results_md_options(parser, SECTION, RESULTS_MD)
    parser.add_argument("--client", help=argparse.SUPPRESS)  # internal: run as the client process
    args = parser.parse_args()
    if args.client:
        print(json.dumps(_client(args.client, args.calls, args.warmup)))
        return
    if args.calls < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("--calls and --rounds must be >= 1, --warmup >= 0")
    rows = measure(args.calls, args.warmup, args.rounds)
    doc = {
        "benchmark": "grpc_event_engine",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "calls": args.calls, "warmup": args.warmup, "rounds": args.rounds,
        "baseline": "grpcio defaults in server and client",
        "rows": rows,
    }  # fmt: skip
    print(results_markdown(doc))
    write_results(doc, args.out, args.results_md, SECTION, results_markdown)


if __name__ == "__main__":
    from servelab.config.signals import exit_on_sigterm

    exit_on_sigterm()  # a SIGTERM (a timeout) still stops the servers this script started
    main()
