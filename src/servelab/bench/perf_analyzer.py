"""perf_analyzer, Triton's C++ load generator, as a second client for ``servelab bench`` and ``compare``.

A figure measured by servelab's own load generator can be confirmed with the client Triton users trust.
perf_analyzer is not on PyPI as a working package; the ``tritonclient==2.40.0`` manylinux1 wheel carries it
(``tritonclient-2.40.0.data/data/bin/perf_analyzer``). It needs ``libb64.so.0d`` (the Debian package
``libb64-0d``, unpacked with ``dpkg -x``) and ``libcudart.so.12`` (the ``nvidia-cuda-runtime-cu12`` wheel; no
GPU is used), found through ``LD_LIBRARY_PATH``. All three are unpacked under ``<peers_dir>/perf_analyzer``
on first use, never installed into servelab's environment (whose tritonclient is newer).

One perf_analyzer run per load level: ``-m MODEL -u HOST:PORT -i http|grpc --concurrency-range N`` (or
``--request-rate-range R``), ``--measurement-interval`` (or count windows), ``-s`` and ``-r`` from the
LoadSpec's stability rule, ``--percentile=99`` (perf_analyzer then stabilises on P99 too), ``-f`` CSV and a
profile export, parsed into a ``LevelResult``. perf_analyzer reports nothing when it finds no stable
measurement within ``-r`` windows: that level carries the reason in ``failures``. It has no warm-up
option (its first windows serve as one) and no per-request timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from servelab.bench._fetch import UnpackedInstall
from servelab.bench._perf_analyzer_report import Reported, parse_csv, server_split, windows_from_export
from servelab.bench.results import LevelResult, SweepResult, summarise_windows
from servelab.bench.serverstats import rss_bytes
from servelab.bench.specs import InputSpec, LoadSpec, TargetSpec
from servelab.errors import InvalidArgument, Unavailable

__all__ = ["PA_VERSION", "PerfAnalyzer", "PerfAnalyzerOptions", "Reported"]

PA_VERSION = "2.40.0"
_WHEEL = f"tritonclient=={PA_VERSION}"
_CUDART = "nvidia-cuda-runtime-cu12==12.3.101"
_LIBB64 = "libb64-0d"
_LIBB64_DIR = Path("libb64") / "usr" / "lib" / "x86_64-linux-gnu"

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class PerfAnalyzerOptions:
    """perf_analyzer's own knobs beyond the LoadSpec (which gives windows, stability and levels).

    ``percentile`` is the latency perf_analyzer stabilises on and prints first (None: its average latency,
    far steadier on a busy machine); the CSV carries P50-P99 either way."""

    percentile: int | None = 99
    async_mode: bool = False
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.percentile is not None and not 1 <= self.percentile <= 99:
            raise InvalidArgument(f"perf_analyzer --percentile must be 1..99, got {self.percentile}")


def _address(target: TargetSpec) -> tuple[str, str]:
    """(``-u`` value, ``-i`` value) for an OIP target; InvalidArgument for anything else."""
    if target.kind == "oip-grpc":
        return target.grpc_address(), "grpc"
    if target.kind == "oip-http":
        base = target.http_base()
        if base.startswith("https://"):
            raise InvalidArgument(f"perf_analyzer here speaks plain HTTP; {target.url} is https")
        return base.removeprefix("http://"), "http"
    raise InvalidArgument(f"perf_analyzer measures OIP servers (oip-http, oip-grpc); target kind is {target.kind!r}")


def _input_args(inputs: InputSpec) -> list[str]:
    args = ["-b", str(inputs.batch_size)]
    if inputs.data_path is not None:
        if not inputs.data_path.endswith(".json"):
            raise InvalidArgument(
                f"perf_analyzer reads its own JSON input files (or zero/random data); got {inputs.data_path!r}"
            )
        args += ["--input-data", inputs.data_path]
    else:
        args += ["--input-data", inputs.fill]
    for name, dims in inputs.shapes.items():
        args += ["--shape", f"{name}:{','.join(str(d) for d in dims)}"]
    return args


def _load_args(load: LoadSpec, level: float) -> list[str]:
    if load.request_count is not None:
        raise InvalidArgument("perf_analyzer has no fixed request count; use windows (--measurement-interval-ms)")
    if load.mode == "concurrency":
        args = ["--concurrency-range", str(int(level))]
    else:
        args = ["--request-rate-range", f"{level:g}", "--request-distribution", load.arrivals]
    if load.window_requests is not None:
        args += ["--measurement-mode", "count_windows", "--measurement-request-count", str(load.window_requests)]
    else:
        args += ["--measurement-interval", str(load.measurement_interval_ms)]
    return [*args, "-s", f"{load.stability_percentage:g}", "-r", str(load.max_windows)]


class PerfAnalyzer:
    """The perf_analyzer binary under ``<peers_dir>/perf_analyzer``; ``sweep`` measures like ``run_sweep``."""

    def __init__(
        self, peers_dir: Path, progress: Progress | None = None, options: PerfAnalyzerOptions | None = None
    ) -> None:
        self.unpacked = UnpackedInstall(peers_dir, "perf_analyzer", [_WHEEL, _CUDART, _LIBB64])
        self.progress: Progress = progress or (lambda _m: None)
        self.options = options or PerfAnalyzerOptions()

    @property
    def binary(self) -> Path:
        return self.unpacked.root / "dist" / f"tritonclient-{PA_VERSION}.data" / "data" / "bin" / "perf_analyzer"

    def env(self) -> dict[str, str]:
        dist = self.unpacked.root / "dist"
        libs = [str(dist / _LIBB64_DIR), str(dist / "nvidia" / "cuda_runtime" / "lib")]
        old = os.environ.get("LD_LIBRARY_PATH")
        return {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(libs + ([old] if old else []))}

    def ensure(self) -> None:
        """Unpack the three parts once (about 40 MB); Unavailable says which step failed."""
        if self.unpacked.is_ready() and self.binary.is_file():
            return
        inst = self.unpacked
        dist = inst.begin(self.progress)
        inst.unzip(inst.pip_download(_WHEEL), dist, lambda n: n.endswith("/bin/perf_analyzer"))
        inst.unzip(inst.pip_download(_CUDART), dist, lambda n: n.startswith("nvidia/cuda_runtime/lib/"))
        inst.deb_extract(_LIBB64, dist / "libb64")
        self.binary.chmod(0o755)
        inst.run([str(self.binary), "--version"], timeout_s=60.0, env=self.env())  # loads both libraries or fails here
        inst.finish()
        self.progress(f"perf_analyzer {PA_VERSION} ready in {inst.root}")

    def argv(self, target: TargetSpec, model: str, load: LoadSpec, inputs: InputSpec, level: float) -> list[str]:
        url, protocol = _address(target)
        opts = self.options
        args = [str(self.binary), "-m", model, "-u", url, "-i", protocol]
        if opts.percentile is not None:
            args.append(f"--percentile={opts.percentile}")
        if target.model_version:
            args += ["-x", target.model_version]
        if target.kind == "oip-http" and not target.binary:
            args += ["--input-tensor-format=json", "--output-tensor-format=json"]
        args += _load_args(load, level) + _input_args(inputs)
        return args + (["--async"] if opts.async_mode else []) + list(opts.extra_args)

    def measure_level(
        self, target: TargetSpec, model: str, load: LoadSpec, inputs: InputSpec, level: float
    ) -> tuple[LevelResult, Reported | None]:
        """One perf_analyzer run at ``level``; a run that reports nothing leaves its reason in ``failures``."""
        argv = self.argv(target, model, load, inputs, level)
        empty = LevelResult(load.mode, level, 1, inputs.batch_size, [], summarise_windows([]), False, 0)
        with tempfile.TemporaryDirectory(prefix="servelab-pa-") as tmp:
            csv_path, export_path, log_path = (Path(tmp) / n for n in ("report.csv", "export.json", "out.log"))
            argv += ["-f", str(csv_path), "--profile-export-file", str(export_path)]
            rc, rss = self._run(argv, log_path, target.server_pid, load.max_level_s + 60.0)
            if rc != 0 or not csv_path.is_file():
                return replace(empty, failures=[self._failure(rc, log_path.read_text(errors="replace"), load)]), None
            reported = next((r for r in parse_csv(csv_path.read_text()) if r.level == level), None)
            doc = json.loads(export_path.read_text())
        if reported is None:
            return replace(empty, failures=[f"perf_analyzer's report has no row for level {level:g}"]), None
        windows, sent = windows_from_export(doc, level, inputs.batch_size)
        summary = summarise_windows(windows[-3:]) if windows else empty.summary
        result = LevelResult(
            mode=load.mode, level=level, workers=1, batch_size=inputs.batch_size, windows=windows, summary=summary,
            stable=True, sent=sent, server=server_split(reported), server_rss_mb=max(rss) / 2**20 if rss else None,
        )  # fmt: skip
        return result, reported

    def _failure(self, rc: int, log: str, load: LoadSpec) -> str:
        if "Failed to obtain stable measurement" in log:
            latency = "average" if self.options.percentile is None else f"P{self.options.percentile}"
            window = f"{load.window_requests} requests" if load.window_requests else f"{load.measurement_interval_ms} ms"
            return (
                f"perf_analyzer found no stable measurement in {load.max_windows} windows of {window} (it needs its "
                f"last 3 windows to agree within {load.stability_percentage:g}% in throughput and "
                f"{latency} latency) and reports nothing then: give longer or more windows, "
                "or a larger stability percentage"
            )
        return f"perf_analyzer exited {rc}: " + " | ".join(log.strip().splitlines()[-4:])

    def _run(self, argv: list[str], log: Path, pid: int | None, timeout_s: float) -> tuple[int, list[int]]:
        """Run to the end, sampling the server's RSS while it measures; (exit status, RSS samples)."""
        rss: list[int] = []
        with log.open("wb") as out:
            try:
                proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env())
            except OSError as exc:
                raise Unavailable(f"cannot run perf_analyzer ({self.binary}): {exc}") from exc
            waited = 0.0
            while True:
                try:
                    return proc.wait(timeout=0.25), rss
                except subprocess.TimeoutExpired:
                    waited += 0.25
                if pid is not None and (r := rss_bytes(pid)) is not None:
                    rss.append(r)
                if waited > timeout_s:
                    proc.kill()
                    proc.wait()
                    out.write(f"\nstopped after {timeout_s:.0f} s (max_level_s + 60)\n".encode())
                    return -9, rss

    def sweep(
        self, target: TargetSpec, model: str, load: LoadSpec, inputs: InputSpec, progress: Progress | None = None
    ) -> SweepResult:
        """Every level of ``load`` against ``target``, as ``run_sweep`` returns them (no ceiling)."""
        self.ensure()
        levels, reported, runs = [], {}, []
        for level in load.levels:
            runs.append(self.argv(target, model, load, inputs, level))
            result, row = self.measure_level(target, model, load, inputs, level)
            levels.append(result)
            if row is not None:
                reported[f"{level:g}"] = row.to_dict()
            if progress is not None:
                say = result.failures[0] if result.failures else f"{row.inferences_per_s:,.0f} infer/s, P99 {row.p99_us:,.0f} us" if row else ""
                progress(f"perf_analyzer level {level:g}: {say}")
        settings = {"client": "perf_analyzer", "perf_analyzer": {"version": PA_VERSION, "argv": runs, "reported": reported},
                    "batch_size": inputs.batch_size, "input_data": inputs.data_path or inputs.fill}  # fmt: skip
        return SweepResult(target=target.url, kind=target.kind, model=model, levels=levels, settings=settings)

