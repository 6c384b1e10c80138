"""servelab against the real Triton Inference Server on the same python models, measured by perf_analyzer.

    python benchmarks/vs_triton.py [--measurement-interval-ms 2000] [--rounds 2] [--concurrency 1,4,16]

The models of examples/triton_models (Triton's add_sub re-implemented, a numpy image pre-processing step,
onnxruntime inside a python model) are built once; ``servelab serve`` and Triton 2.51 (nvidia-pytriton's
``tritonserver``, python backend, installed under .peers/triton on first use) serve the same files, both
up for the whole run, each on its own free 127.0.0.1 ports. perf_analyzer 2.40 (installed under
.peers/perf_analyzer) measures every (model, protocol, concurrency) cell on servelab and then on Triton,
back to back, and the cells repeat for ``--rounds`` rounds, so machine noise hits both servers alike.
Each server's figure is its median round by throughput (perf_analyzer's own infer/s and P99, from its CSV);
a round perf_analyzer could not stabilise is listed, not averaged in. The ratio is servelab / Triton in
the same run. Writes benchmarks/results/vs_triton.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results" / "vs_triton.json"
RESULTS_MD = HERE / "RESULTS.md"
SECTION = "vs_triton"  # the section of RESULTS_MD this script writes
MODELS = ("add_sub", "image_preprocess", "ort_inside")
SERVERS = ("servelab", "triton")
#: how servelab runs the python models: as a Triton user moves in (worker processes, the default), and with the
#: models declared thread-safe and non-blocking through servelab-only config parameters (Triton ignores them and
#: is given the untouched files): they then run on servelab's event loop
SERVELAB_MODES = {
    "process": "worker processes (default config)",
    "process2": "worker processes (default config), in 2 server processes on the same ports (`--processes 2`), each with its own worker",
    "inline": "instance_mode thread + execute_never_blocks (on the event loop)",
    "inline2": "inline, in 2 server processes on the same ports (`--processes 2`, SO_REUSEPORT)",
}
#: the modes a run measures unless told (``process2`` measured no better than ``process`` on 2 cores: RESULTS.md)
DEFAULT_MODES = ("process", "inline", "inline2")
#: servelab serve's arguments per mode, beside the repository and the models to load
_MODE_ARGS = {"inline2": ("--processes", "2"), "process2": ("--processes", "2")}
_INLINE_PARAMETERS = (
    'parameters { key: "instance_mode" value { string_value: "thread" } }\n'
    'parameters { key: "execute_never_blocks" value { string_value: "1" } }\n'
)
#: protocol -> (minimum servelab/Triton throughput, P99 must be no worse): issue #14's bars
BARS = {"http": (1.0, True), "grpc": (0.8, False)}


def _server_name(mode: str) -> str:
    return "servelab" if mode == "process" else f"servelab-{mode}"


def inline_copy(repo: Path, dest: Path) -> Path:
    """``repo`` with each benchmarked model's config declaring it may run on the loop (model.py untouched)."""
    shutil.copytree(repo, dest)
    for model in MODELS:
        config = dest / model / "config.pbtxt"
        config.write_text(config.read_text().rstrip("\n") + "\n" + _INLINE_PARAMETERS)
    return dest


@contextmanager
def _servers(repo: Path, peers_dir: Path, modes: list[str], say: Any) -> Iterator[dict[str, Any]]:
    """servelab (one server per mode) and Triton, all three models loaded; yields server name -> Endpoint."""
    from servelab.bench.peers.servelab_target import ServelabPeer
    from servelab.bench.peers.triton import TritonPeer

    loads = tuple(a for m in MODELS[1:] for a in ("--load-model", m))
    with ExitStack() as stack:
        endpoints = {}
        for mode in modes:
            served = repo if mode.startswith("process") else inline_copy(repo, repo.parent / f"models-{mode}")
            peer = stack.enter_context(ServelabPeer(served, MODELS[0], progress=say,
                                                    extra_args=(*loads, *_MODE_ARGS.get(mode, ()))))
            endpoints[_server_name(mode)] = peer.start()
        triton = stack.enter_context(TritonPeer(peers_dir, progress=say))
        triton.install()
        for model in MODELS:
            triton.add_python_model(repo / model)
        endpoints["triton"] = triton.start()
        yield endpoints


def _cell(pa: Any, endpoint: Any, model: str, protocol: str, concurrency: int, load: Any) -> dict[str, Any]:
    """One perf_analyzer run; its own figures, or why it reported none."""
    from servelab.bench.specs import InputSpec, TargetSpec

    url = endpoint.extra["grpc"] if protocol == "grpc" else endpoint.extra["http"]
    target = TargetSpec(f"oip-{protocol}", url, server_pid=endpoint.pid)  # type: ignore[arg-type]
    level, reported = pa.measure_level(target, model, load, InputSpec(), float(concurrency))
    if reported is None:
        return {"ok": False, "failure": level.failures[0] if level.failures else "no report"}
    return {"ok": True, **reported.to_dict(), "server_rss_mb": level.server_rss_mb,
            "histogram_p99_us": level.summary.histogram.percentile(99) * 1e6}  # fmt: skip


def measure(args: argparse.Namespace, say: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows, every run): each cell on every servelab mode and on Triton back to back, the order reversed on
    odd rounds, ``rounds`` times over."""
    sys.path.insert(0, str(ROOT / "examples" / "triton_models"))
    from build_triton_models import build

    from servelab.bench.perf_analyzer import PerfAnalyzer, PerfAnalyzerOptions
    from servelab.bench.specs import LoadSpec

    pa = PerfAnalyzer(args.peers_dir, say, PerfAnalyzerOptions(percentile=args.percentile or None))
    pa.ensure()
    load = LoadSpec(measurement_interval_ms=args.measurement_interval_ms, stability_percentage=args.stability_percentage,
                    max_windows=args.max_trials, max_level_s=args.max_trials * args.measurement_interval_ms / 1e3 + 60)  # fmt: skip
    cells = [(m, p, c) for m in args.models for p in args.protocols for c in args.concurrency]
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="servelab-vs-triton-") as tmp:
        repo = build(Path(tmp) / "models")
        servers = [*(_server_name(m) for m in args.servelab_modes), "triton"]
        with _servers(repo, args.peers_dir, args.servelab_modes, say) as endpoints:
            for rnd in range(args.rounds):
                for model, protocol, conc in cells:
                    for server in servers if rnd % 2 == 0 else servers[::-1]:
                        got = _cell(pa, endpoints[server], model, protocol, conc, load)
                        run = {"round": rnd, "server": server, "model": model, "protocol": protocol, "concurrency": conc, **got}
                        print(json.dumps(run), flush=True)
                        runs.append(run)
    return [_row(runs, m, p, c, mode) for m, p, c in cells for mode in args.servelab_modes], runs


def _median(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    ok = sorted((r for r in runs if r["ok"]), key=lambda r: r["inferences_per_s"])
    return ok[len(ok) // 2] if ok else None


def _row(runs: list[dict[str, Any]], model: str, protocol: str, conc: int, mode: str = "process") -> dict[str, Any]:
    """One cell for one servelab mode against Triton (keys ``servelab`` and ``triton`` whatever the mode)."""
    row: dict[str, Any] = {"model": model, "protocol": protocol, "concurrency": conc, "mode": mode}
    for server in SERVERS:
        name = _server_name(mode) if server == "servelab" else server
        mine = [r for r in runs if (r["server"], r["model"], r["protocol"], r["concurrency"]) == (name, model, protocol, conc)]
        mid = _median(mine)
        row[server] = None if mid is None else {k: mid[k] for k in ("inferences_per_s", "p50_us", "p99_us", "server_rss_mb")}
        row[f"{server}_rounds"] = [r["inferences_per_s"] if r["ok"] else None for r in mine]
        row[f"{server}_failures"] = [r["failure"] for r in mine if not r["ok"]]
    s, t = row["servelab"], row["triton"]
    row["throughput_ratio"] = s["inferences_per_s"] / t["inferences_per_s"] if s and t and t["inferences_per_s"] else None
    row["p99_ratio"] = s["p99_us"] / t["p99_us"] if s and t and t["p99_us"] else None
    minimum, p99_too = BARS[protocol]
    row["meets_bar"] = None if row["throughput_ratio"] is None else bool(
        row["throughput_ratio"] >= minimum and (not p99_too or (row["p99_ratio"] or 0) <= 1.0)
    )
    return row


def _fig(cell: dict[str, Any] | None) -> tuple[str, str]:
    return ("-", "-") if cell is None else (f"{cell['inferences_per_s']:,.0f}", f"{cell['p99_us']:,.0f}")


def _on(settings: dict[str, Any]) -> str:
    return f"P{settings['percentile']}" if settings.get("percentile") else "average"


def results_markdown(doc: dict[str, Any]) -> str:
    """This run's section of RESULTS.md, from the document written to JSON."""
    from servelab.bench.results_md import markdown_table

    s = doc["settings"]
    modes = s.get("servelab_modes", [])  # absent from documents written before the modes
    head = (
        f"perf_analyzer {doc['perf_analyzer']} against servelab and Triton {doc['triton']} (python backend) on the "
        + (f"same model.py files, every server up for the whole run, each cell measured on each server back to back "
           f"in each of {s['rounds']} rounds (the order reversed on odd rounds)" if "servelab_modes" in s else
           f"same model.py files, both servers up, each cell measured on servelab then Triton in each of {s['rounds']} rounds")
        + f"; windows of {s['measurement_interval_ms']} ms, stable within "
        f"{s['stability_percentage']:g}% in throughput and {_on(s)} latency, at most {s['max_trials']} windows; "
        f"median round by throughput. `ort_inside` runs onnxruntime inside the python model on both servers. "
        f"Bars (issue #14): HTTP >= 1.0x with P99 no worse, gRPC >= 0.8x.\n\n"
        + "".join(f"- servelab `{m}`: {SERVELAB_MODES[m]}\n" for m in modes)
        + ("  (Triton is given the untouched config.pbtxt files)\n" if any(m.startswith("inline") for m in modes) else "")
        + ("\n" if modes else "")
    )
    columns = ("model", "protocol", "c", *(("servelab mode",) if modes else ()), "servelab infer/s", "servelab P99 us", "Triton infer/s", "Triton P99 us",
               "servelab / Triton", "P99 ratio", "bar")  # fmt: skip
    cells = []
    for r in doc["rows"]:
        ratio = "-" if r["throughput_ratio"] is None else f"{r['throughput_ratio']:.2f}x"
        p99 = "-" if r["p99_ratio"] is None else f"{r['p99_ratio']:.2f}"
        bar = {None: "-", True: "met", False: "missed"}[r["meets_bar"]]
        cells.append((r["model"], r["protocol"].upper() if r["protocol"] == "http" else "gRPC", r["concurrency"],
                      *((r.get("mode", "process"),) if modes else ()), *_fig(r["servelab"]), *_fig(r["triton"]), ratio, p99, bar))  # fmt: skip
    said: set[str] = set()
    failed = []
    for r in doc["rows"]:
        for srv in SERVERS:
            name = _server_name(r.get("mode", "process")) if srv == "servelab" else srv
            line = f"- {r['model']} {r['protocol']} c={r['concurrency']} {name}: {len(r[f'{srv}_failures'])} round(s) not stable"
            if r[f"{srv}_failures"] and line not in said:
                said.add(line)
                failed.append(line)
    return head + markdown_table(columns, cells) + ("\n" + "\n".join(failed) + "\n" if failed else "")


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    from servelab.bench.results_md import add_results_md_options, write_results

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--measurement-interval-ms", type=int, default=2000, help="perf_analyzer -p")
    parser.add_argument("--stability-percentage", type=float, default=10.0, help="perf_analyzer -s")
    parser.add_argument("--max-trials", type=int, default=10, help="perf_analyzer -r (windows per cell, >= 3)")
    parser.add_argument("--percentile", type=int, default=99, help="perf_analyzer --percentile (0: stabilise on the average)")
    parser.add_argument("--rounds", type=int, default=2, help="times every cell is measured on each server")
    parser.add_argument("--concurrency", type=_int_list, default=[1, 4, 16])
    parser.add_argument("--protocols", type=lambda t: t.split(","), default=["http", "grpc"])
    parser.add_argument("--models", type=lambda t: t.split(","), default=list(MODELS))
    parser.add_argument("--servelab-modes", type=lambda t: t.split(","), default=list(DEFAULT_MODES),
                        help=f"how servelab runs the python models, some of {list(SERVELAB_MODES)}")
    parser.add_argument("--peers-dir", type=Path, default=ROOT / ".peers")
    parser.add_argument("--out", type=Path, default=RESULTS)
    add_results_md_options(parser, SECTION, RESULTS_MD)
    args = parser.parse_args()
    if args.rounds < 1 or args.max_trials < 3 or args.measurement_interval_ms < 10 or not args.concurrency:
        parser.error("--rounds must be >= 1, --max-trials >= 3, --measurement-interval-ms >= 10, --concurrency non-empty")
    if set(args.protocols) - set(BARS) or set(args.models) - set(MODELS) or set(args.servelab_modes) - set(SERVELAB_MODES):
        parser.error(f"--protocols are among {sorted(BARS)}, --models among {list(MODELS)}, "
                     f"--servelab-modes among {list(SERVELAB_MODES)}")  # fmt: skip
    from servelab.bench.peers._triton_install import TRITON_VERSION
    from servelab.bench.perf_analyzer import PA_VERSION

    rows, runs = measure(args, lambda m: print(m, file=sys.stderr, flush=True))
    doc = {
        "benchmark": "vs_triton",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "triton": TRITON_VERSION, "perf_analyzer": PA_VERSION,
        "settings": {"measurement_interval_ms": args.measurement_interval_ms, "stability_percentage": args.stability_percentage,
                     "max_trials": args.max_trials, "percentile": args.percentile, "rounds": args.rounds, "concurrency": args.concurrency,
                     "protocols": args.protocols, "models": args.models, "servelab_modes": args.servelab_modes},
        "rows": rows, "runs": runs,
    }  # fmt: skip
    print(results_markdown(doc))
    write_results(doc, args.out, args.results_md, SECTION, results_markdown)


if __name__ == "__main__":
    from servelab.config.signals import exit_on_sigterm

    exit_on_sigterm()  # a SIGTERM (a timeout) still stops the servers this script started
    main()
