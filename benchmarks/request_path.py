"""What one small REST inference costs servelab's own process, with no socket and no client in the way.

    python benchmarks/request_path.py [--requests 4000] [--rounds 5] [--gap-us 200]

Triton's add_sub (examples/triton_models, model.py untouched) served the two ways vs_triton.py runs it: in a
worker process (``process``, the default for a python model) and on the event loop (``inline``: the config
declares it thread-safe and non-blocking). Each measurement is a fresh process that builds the data plane and
the REST app as ``servelab serve`` does, loads the model and calls the app directly (ASGI: the same route,
decode, scheduling, model call and encode; no HTTP parsing, no socket), ``--requests`` times back to back
(``busy``), then ``--requests`` times with the thread asleep ``--gap-us`` between two requests (``gap``: what
a server does between a client's requests at concurrency 1). Per request it reports the wall time, the
server process's CPU time, user and system (in process mode: what the front door pays, the hop included), and
the worker process's CPU time (process mode; its polling for the next request included). Modes alternate
across rounds, the median round by wall time is kept, and the ratios are against the median ``inline busy``
of the same run (each round's own ratios are in the JSON).

Why in-process: over HTTP on this 2-core virtual machine the same command swings by +-20% from one hour to
the next; CPU per request in one process is steadier and splits what the Python path costs from what
sleeping and waking up cost (the ``gap`` rows: the same code after an idle spell).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results" / "request_path.json"
RESULTS_MD = HERE / "RESULTS.md"
SECTION = "request_path"  # the section of RESULTS_MD this script writes
MODES = ("inline", "process")
KINDS = ("busy", "gap")
MODEL = "add_sub"
#: the request perf_analyzer sends add_sub over HTTP (JSON data, JSON outputs)
BODY = json.dumps({
    "inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [0.5, 1.5, 2.5, 3.5]},
               {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1.0, 1.0, 1.0, 1.0]}],
    "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}},
                {"name": "OUTPUT1", "parameters": {"binary_data": False}}],
}).encode()  # fmt: skip
WARMUP = 1000


def _scope() -> dict[str, Any]:
    path = f"/v2/models/{MODEL}/infer"
    headers = [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
               (b"content-length", str(len(BODY)).encode())]  # fmt: skip
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "scheme": "http",
            "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 40000), "method": "POST", "root_path": "",
            "path": path, "raw_path": path.encode(), "query_string": b"", "headers": headers, "state": {}}  # fmt: skip


async def _calls(app: Any, n: int, gap_s: float) -> dict[str, float]:
    """``n`` requests through ``app``; per request (microseconds): wall time, this process's user and system
    CPU, and the CPU of its child processes (the model's worker, in process mode)."""
    import psutil

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": BODY, "more_body": False}

    status: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    def cpu() -> tuple[float, float, float]:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = sum(sum(p.cpu_times()[:2]) for p in psutil.Process().children(recursive=True))
        return own.ru_utime, own.ru_stime, kids

    wall = 0
    before = cpu()
    for _ in range(n):
        start = time.perf_counter_ns()
        await app(_scope(), receive, send)
        wall += time.perf_counter_ns() - start
        if gap_s:
            time.sleep(gap_s)  # the loop's thread idle, as between a client's requests
    after = cpu()
    bad = [s for s in status if s != 200]
    if bad:
        raise RuntimeError(f"{len(bad)} of {n} requests answered {bad[0]}")
    user, system, worker = ((a - b) / n * 1e6 for a, b in zip(after, before, strict=True))
    return {"wall_us": wall / n / 1e3, "user_us": user, "sys_us": system, "worker_us": worker}


def _child(repo: str, n: int, gap_us: int) -> dict[str, Any]:
    """Runs in a fresh process: servelab's data plane and REST app on ``repo``, add_sub loaded, both kinds."""
    import uvloop

    from servelab.config.settings import ServerSettings
    from servelab.frontends.rest.app import create_app
    from servelab.frontends.server import Server

    settings = ServerSettings(model_repository=[repo], model_control_mode="explicit", load_models=[MODEL])
    server = Server(settings)
    server.dataplane.startup([MODEL])
    app = create_app(server.dataplane, settings, server.metrics_registry, server.door, shared_memory=server.shared_memory)

    async def run() -> dict[str, Any]:
        await _calls(app, WARMUP, 0)
        return {"busy": await _calls(app, n, 0), "gap": await _calls(app, n, gap_us / 1e6)}

    try:
        return uvloop.run(run())
    finally:
        server.dataplane.close(timeout_s=10)


def _run_child(repo: Path, n: int, gap_us: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", str(repo), "--requests", str(n), "--gap-us", str(gap_us)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the measuring process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(n: int, rounds: int, gap_us: int) -> list[dict[str, Any]]:
    """Both modes in alternating rounds (the order reversed on odd rounds); the median round of each."""
    sys.path.insert(0, str(ROOT / "examples" / "triton_models"))
    from build_triton_models import build
    from vs_triton import inline_copy

    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="servelab-request-path-") as tmp:
        repos = {"process": build(Path(tmp) / "models")}
        repos["inline"] = inline_copy(repos["process"], Path(tmp) / "models-inline")
        for rnd in range(rounds):
            for mode in MODES if rnd % 2 == 0 else MODES[::-1]:
                got = _run_child(repos[mode], n, gap_us)
                print(json.dumps({"round": rnd, "mode": mode, **got}), flush=True)
                runs[mode].append({"round": rnd, **got})
    rows = []
    for rnd in range(rounds):
        base = next(r for r in runs["inline"] if r["round"] == rnd)["busy"]
        for mode in MODES:
            run = next(r for r in runs[mode] if r["round"] == rnd)
            for kind in KINDS:
                cell = run[kind]
                rows.append({"round": rnd, "mode": mode, "kind": kind, **cell,
                             "x_wall": cell["wall_us"] / base["wall_us"],
                             "x_cpu": (cell["user_us"] + cell["sys_us"]) / (base["user_us"] + base["sys_us"])})  # fmt: skip
    return rows


def median_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (mode, kind): the round with the median wall time, every round's wall time beside it, and its
    wall and CPU as ratios to the median ``inline busy`` (``x_wall``, ``x_cpu``)."""
    out = []
    for mode in MODES:
        for kind in KINDS:
            cells = sorted((r for r in rows if r["mode"] == mode and r["kind"] == kind), key=lambda r: r["wall_us"])
            if cells:
                out.append({**cells[len(cells) // 2], "rounds_wall_us": [round(r["wall_us"], 1) for r in cells]})
    base = next((r for r in out if r["mode"] == "inline" and r["kind"] == "busy"), None)
    for r in out if base is not None else ():
        r["x_wall"] = r["wall_us"] / base["wall_us"]
        r["x_cpu"] = (r["user_us"] + r["sys_us"]) / (base["user_us"] + base["sys_us"])
    return out


def results_markdown(doc: dict[str, Any]) -> str:
    """This run's section of RESULTS.md, from the document written to JSON."""
    from servelab.bench.results_md import markdown_table

    head = (
        f"Triton's add_sub model.py, the REST app called in-process (ASGI, no socket), {doc['requests']:,} requests "
        f"per cell after {doc['warmup']:,} untimed; `gap`: the thread asleep {doc['gap_us']} us between two "
        f"requests. `worker CPU` is the model's worker process (`process` mode). Median of {doc['rounds']} "
        "alternating rounds by wall time; `x` is against the median `inline busy`.\n\n"
    )
    columns = ("mode", "requests", "wall us", "user CPU us", "system CPU us", "worker CPU us", "x wall", "x CPU (server)",
               "wall us, every round")  # fmt: skip
    cells = [
        (r["mode"], r["kind"], f"{r['wall_us']:.0f}", f"{r['user_us']:.0f}", f"{r['sys_us']:.0f}",
         f"{r['worker_us']:.0f}" if r["mode"] == "process" else "-", f"{r['x_wall']:.2f}", f"{r['x_cpu']:.2f}",
         " / ".join(f"{w:.0f}" for w in r["rounds_wall_us"]))
        for r in median_rows(doc["rows"])
    ]  # fmt: skip
    return head + markdown_table(columns, cells)


def main() -> None:
    from servelab.bench.results_md import add_results_md_options, write_results

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=4000, help="timed requests per mode and kind")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gap-us", type=int, default=200, help="idle time between two requests in the gap rows")
    parser.add_argument("--out", type=Path, default=RESULTS)
    add_results_md_options(parser, SECTION, RESULTS_MD)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: measure one repository in this process
    args = parser.parse_args()
    if args.requests < 1 or args.rounds < 1 or args.gap_us < 1:
        parser.error("--requests, --rounds and --gap-us must be >= 1")
    if args.child:
        print(json.dumps(_child(args.child, args.requests, args.gap_us)))
        return
    rows = measure(args.requests, args.rounds, args.gap_us)
    doc = {
        "benchmark": "request_path",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "model": MODEL, "requests": args.requests, "warmup": WARMUP, "rounds": args.rounds, "gap_us": args.gap_us,
        "baseline": "inline busy (per round in rows, the median in the section)",
        "rows": rows,
    }  # fmt: skip
    print(results_markdown(doc))
    write_results(doc, args.out, args.results_md, SECTION, results_markdown)


if __name__ == "__main__":
    from servelab.config.signals import exit_on_sigterm

    exit_on_sigterm()  # a SIGTERM (a timeout) stops the measuring process too
    main()
