"""`servelab bench`: measure a model on any server (or in-process) through its public client side."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from servelab.cli._extras import require_extra
from servelab.errors import ServelabError

if TYPE_CHECKING:  # servelab.bench needs the bench extra: imported when the command runs
    from servelab.bench.results import SweepResult
    from servelab.bench.specs import InputSpec, LoadSpec, TargetKind, TargetSpec
    from servelab.bench.stats import WindowStats

_DEFAULT_URL = {"http": "http://127.0.0.1:8000", "grpc": "127.0.0.1:8001"}
_TARGETS = ("oip", "torchserve", "tfserving", "inprocess")


def _levels(text: str, option: str) -> tuple[float, ...]:
    try:
        levels = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        levels = ()
    if not levels:
        raise typer.BadParameter(
            f"expected a comma-separated list of numbers such as 1,8,64; got {text!r}", param_hint=option
        )
    return levels


def _target(
    model: str,
    url: str | None,
    protocol: str,
    target: str,
    json_tensors: bool,
    pid: int | None,
    timeout_s: float,
) -> TargetSpec:
    from servelab.bench.specs import TargetSpec

    if target not in _TARGETS:
        raise typer.BadParameter(
            f"expected one of {', '.join(_TARGETS)}; got {target!r}", param_hint="--target"
        )
    if protocol not in _DEFAULT_URL:
        raise typer.BadParameter(f"expected http or grpc; got {protocol!r}", param_hint="--protocol")
    if target == "inprocess":
        return TargetSpec("inprocess", url or model, timeout_s=timeout_s)
    kind = cast(
        "TargetKind", {"oip": f"oip-{protocol}", "torchserve": "torchserve", "tfserving": "tfserving"}[target]
    )
    url = url or _DEFAULT_URL[protocol]
    return TargetSpec(kind, url, binary=not json_tensors, server_pid=pid, timeout_s=timeout_s)


def _run_with_progress(
    target: TargetSpec, model: str, load: LoadSpec, inputs: InputSpec, ceiling: bool, console: Console
) -> SweepResult:
    from servelab.bench.sweep import run_sweep

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        tasks: dict[float, TaskID] = {}

        def on_window(level: float, index: int, window: WindowStats) -> None:
            if level not in tasks:
                name = f"c={level:g}" if load.mode == "concurrency" else f"{level:g} req/s"
                tasks[level] = progress.add_task(f"{name} windows", total=load.max_windows, info="")
            info = f"{window.requests_per_s:,.0f} req/s  p50 {window.histogram.percentile(50) * 1e3:.2f} ms"
            progress.update(tasks[level], completed=index + 1, info=info)

        return run_sweep(target, model, load, inputs, measure_ceiling=ceiling, progress=on_window)


def bench(
    model: Annotated[
        str, typer.Argument(help="Model name (for --target inprocess: a .onnx path unless --url is given).")
    ],
    url: Annotated[
        str | None, typer.Option(help="Server URL: http://host:port (HTTP) or host:port (gRPC).")
    ] = None,
    protocol: Annotated[str, typer.Option(help="OIP transport: http or grpc.")] = "http",
    target: Annotated[
        str, typer.Option(help="oip | torchserve | tfserving | inprocess (onnxruntime, no server).")
    ] = "oip",
    concurrency: Annotated[
        str | None, typer.Option(help="Closed loop: in-flight requests per level, e.g. 1,8,64.")
    ] = None,
    request_rate: Annotated[
        str | None, typer.Option(help="Open loop: requests/s per level, e.g. 100,1000.")
    ] = None,
    arrivals: Annotated[str, typer.Option(help="Open-loop arrivals: constant or poisson.")] = "constant",
    batch_size: Annotated[int, typer.Option(help="Samples per request (stacked on a new first axis).")] = 1,
    input_data: Annotated[
        str | None, typer.Option(help=".npz, .npy, perf_analyzer JSON, or a folder of samples.")
    ] = None,
    shape: Annotated[
        list[str] | None, typer.Option(help="NAME:d1,d2 to resolve -1 dims (batch dim excluded); repeatable.")
    ] = None,
    zero_data: Annotated[bool, typer.Option(help="Send zeros instead of random data.")] = False,
    json_tensors: Annotated[
        bool, typer.Option(help="OIP HTTP: JSON tensors instead of the binary extension.")
    ] = False,
    stability_percentage: Annotated[
        float, typer.Option(help="Last 3 windows' req/s and P50 must agree within this %.")
    ] = 10.0,
    measurement_interval_ms: Annotated[int, typer.Option(help="Length of a time window.")] = 2000,
    measurement_request_count: Annotated[
        int | None, typer.Option(help="Count windows: requests per window instead of time.")
    ] = None,
    request_count: Annotated[
        int | None, typer.Option(help="Send exactly this many measured requests per level.")
    ] = None,
    max_windows: Annotated[int, typer.Option(help="Stop after this many windows even if not stable.")] = 10,
    warmup_requests: Annotated[int, typer.Option(help="Requests sent before measuring, per level.")] = 10,
    workers: Annotated[int, typer.Option(help="Load-generator processes (each its own event loop).")] = 1,
    max_inflight: Annotated[int, typer.Option(
        help="Open loop: cap on requests outstanding, sent or due; at most 64 a worker are on the wire, the rest "
        "wait in the worker, the wait counted in their latency.")] = 512,
    max_level_s: Annotated[float, typer.Option(help="Hard time limit per level, seconds.")] = 120.0,
    timeout_s: Annotated[float, typer.Option(help="Per-request timeout, seconds.")] = 30.0,
    server_pid: Annotated[int | None, typer.Option(help="Report this process's RSS (plus children).")] = None,
    ceiling: Annotated[
        bool, typer.Option(help="Measure the generator's ceiling against a null endpoint.")
    ] = True,
    output: Annotated[Path | None, typer.Option(help="Write results as JSON here.")] = None,
    csv: Annotated[Path | None, typer.Option(help="Write one CSV row per level here.")] = None,
    html: Annotated[
        Path | None, typer.Option(help="Write a self-contained HTML report (tables + plots) here.")
    ] = None,
    client: Annotated[
        str,
        typer.Option(
            help="Load generator: builtin, or perf_analyzer (Triton's C++ client 2.40, OIP targets; "
            "installed under --peers-dir on first use; no ceiling, no warm-up, no --request-count)."
        ),
    ] = "builtin",
    peers_dir: Annotated[Path, typer.Option(help="Where perf_analyzer is unpacked.")] = Path(".peers"),
) -> None:
    """Measure throughput and latency percentiles of MODEL at each load level."""
    require_extra("bench", "bench")
    from servelab.bench.inputs import parse_shape_option
    from servelab.bench.report import print_table, write_csv, write_json
    from servelab.bench.specs import InputSpec, LoadSpec

    console = Console(stderr=True)
    if concurrency and request_rate:
        raise typer.BadParameter(
            "give --concurrency or --request-rate, not both", param_hint="--request-rate"
        )
    mode = "request_rate" if request_rate else "concurrency"
    levels = (
        _levels(request_rate, "--request-rate")
        if request_rate
        else _levels(concurrency or "1", "--concurrency")
    )
    try:
        spec = _target(model, url, protocol, target, json_tensors, server_pid, timeout_s)
        load = LoadSpec(
            mode=mode, levels=levels, arrivals=arrivals, measurement_interval_ms=measurement_interval_ms,  # type: ignore[arg-type]
            window_requests=measurement_request_count, request_count=request_count,
            stability_percentage=stability_percentage, max_windows=max_windows, warmup_requests=warmup_requests,
            workers=workers, max_inflight=max_inflight, max_level_s=max_level_s,
        )  # fmt: skip
        inputs = InputSpec(
            input_data, parse_shape_option(shape or []), batch_size, "zero" if zero_data else "random"
        )
        name = Path(spec.url).stem if spec.kind == "inprocess" and url is None else model
        if client == "perf_analyzer":
            from servelab.bench.perf_analyzer import PerfAnalyzer

            def say(message: str) -> None:
                console.print(f"[dim]{message}[/dim]")

            result = PerfAnalyzer(peers_dir, say).sweep(spec, name, load, inputs, say)
        elif client == "builtin":
            result = _run_with_progress(spec, name, load, inputs, ceiling, console)
        else:
            raise typer.BadParameter(f"expected builtin or perf_analyzer; got {client!r}", param_hint="--client")
    except ServelabError as exc:
        console.print(f"[red]error[/red] ({exc.code.value}): {exc.message}")
        raise typer.Exit(2) from exc
    print_table([result], Console() if sys.stdout.isatty() else Console(width=160))
    for lv in result.levels:
        for failure in lv.failures:
            console.print(f"[red]level {lv.level:g}:[/red] {failure}")
    if output:
        write_json([result], output)
    if csv:
        write_csv([result], csv)
    if html:
        from servelab.bench.plots import write_html

        write_html([result], html)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("bench")(bench)
