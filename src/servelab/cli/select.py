"""`servelab select MODEL --data FILE --sla-p99-ms 50 --min-throughput 1000`: convert, measure, choose, write.

MODEL is anything ``servelab convert`` takes, or a repository ``convert`` already wrote. The winner's
config.pbtxt goes into ``--repo``; the report (Markdown, HTML, JSON) into ``--report``. Every duration
of the measurement is a flag, so a quick look and a careful run are the same command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from servelab.cli.convert import split_list
from servelab.errors import ServelabError

__all__ = ["register", "select_command"]

console = Console()
if not console.is_terminal:
    console = Console(width=160)


def _print(result: object) -> None:
    from servelab.advisor.report import MATRIX_COLUMNS, matrix_rows

    table = Table(title=f"servelab select: {result.converted.name}")  # type: ignore[attr-defined]
    for col in MATRIX_COLUMNS:
        table.add_column(col, overflow="fold")
    for row in matrix_rows(result):  # type: ignore[arg-type]
        table.add_row(*row)
    console.print(table)


def select_command(
    model: Annotated[str, typer.Argument(help="A source servelab convert takes, or a repository it wrote.")],
    data: Annotated[Path | None, typer.Option("--data", help="Real input samples: .npz, .json requests, .csv/.parquet table.")] = None,
    random_inputs: Annotated[bool, typer.Option("--random-inputs", help="Measure on random inputs (the report says so).")] = False,
    sla_p99_ms: Annotated[float, typer.Option("--sla-p99-ms", help="P99 latency every load must keep.")] = 50.0,
    min_throughput: Annotated[float, typer.Option("--min-throughput", help="Requests/s the pick must sustain within the SLA.")] = 0.0,
    max_memory_mb: Annotated[float | None, typer.Option("--max-memory-mb", help="Largest server RSS allowed.")] = None,
    max_accuracy_drop: Annotated[float | None, typer.Option("--max-accuracy-drop", help="Largest parity drop allowed (1 - top-1 agreement, or relative error).")] = None,
    weights: Annotated[str | None, typer.Option("--weights", help="e.g. latency=0.3,throughput=0.3,memory=0.1,team_stack=0.1")] = None,
    repo: Annotated[Path, typer.Option("--repo", help="Repository the selected config.pbtxt is written into.")] = Path("out/selected"),
    name: Annotated[str | None, typer.Option("--name", help="Model name in --repo (default: the source's stem).")] = None,
    report: Annotated[Path, typer.Option("--report", help="Folder for select.md/.html/.json (and converted artefacts).")] = Path("out/select"),
    to: Annotated[str, typer.Option("--to", help="Runtimes: onnx,openvino,torchscript[,tensorrt].")] = "onnx,openvino,torchscript",
    precision: Annotated[str, typer.Option("--precision", help="fp32,fp16,int8,int8-static.")] = "fp32,fp16,int8",
    batching: Annotated[str, typer.Option("--batching", help="off and MAX_BATCH:DELAY_US settings.")] = "off,8:200,32:1000",
    instances: Annotated[str, typer.Option("--instances", help="Instance counts.")] = "1,2",
    threads: Annotated[str, typer.Option("--threads", help="Runtime threads per instance.")] = "1,2",
    front_doors: Annotated[str, typer.Option("--front-doors", help="rest (binary tensors), grpc.")] = "rest,grpc",
    peers: Annotated[str, typer.Option("--peers", help="Reference peers: torchserve,mlserver,triton or none.")] = "torchserve,mlserver,triton",
    peers_dir: Annotated[Path, typer.Option("--peers-dir", help="Where peers' own venvs live.")] = Path(".peers"),
    window_ms: Annotated[int, typer.Option("--window-ms", help="Measurement window per load level.")] = 1000,
    max_windows: Annotated[int, typer.Option("--max-windows", help="Windows per level (>= 3).")] = 3,
    warmup: Annotated[int, typer.Option("--warmup-requests", help="Requests before each level counts.")] = 20,
    rate_steps: Annotated[int, typer.Option("--rate-steps", help="Bisection steps of the rate search.")] = 4,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Closed-loop clients of the capacity run.")] = 16,
    client_batch: Annotated[int, typer.Option("--client-batch", help="Samples per request.")] = 1,
    budget: Annotated[float, typer.Option("--budget", help="Largest share of the grid to measure.")] = 0.25,
    time_budget_min: Annotated[float, typer.Option("--time-budget-min", help="Wall-clock budget of the whole run (12: a margin under 15 minutes); the quick search stops early to keep it, leaving each peer 75 s (0: none).")] = 12.0,
    max_batch_size: Annotated[int, typer.Option("--max-batch-size", help="max_batch_size of the converted models (0: the model does not batch).")] = 32,
    keep_runtimes: Annotated[int, typer.Option("--keep-runtimes", help="Artefacts kept after the in-process prune.")] = 3,
    inprocess_s: Annotated[float, typer.Option("--inprocess-s", help="Seconds of the in-process run per artefact.")] = 0.5,
    exhaustive: Annotated[bool, typer.Option("--exhaustive", help="Measure every grid point (for comparison).")] = False,
    qualitative: Annotated[Path | None, typer.Option("--qualitative", help="Your own qualitative scores (TOML).")] = None,
    inputs: Annotated[list[str] | None, typer.Option("--input", help="NAME:DTYPE:dims (TorchScript sources).")] = None,
    calibration_samples: Annotated[int, typer.Option("--calibration-samples", help="Calibration samples for int8-static.")] = 64,
) -> None:  # fmt: skip
    """Choose the runtime, precision and serving configuration that meets the SLA best; write its config.pbtxt."""
    from servelab.advisor.grid import parse_batching, parse_ints
    from servelab.advisor.matrix import Constraints, parse_weights
    from servelab.advisor.report import write_reports
    from servelab.advisor.select import SelectSpec, run_select
    from servelab.advisor.wire import MeasureSettings
    from servelab.convert.sources import parse_input_option

    try:
        spec = SelectSpec(
            model=model, repo=repo, report_dir=report, name=name, data=data, random_inputs=random_inputs,
            constraints=Constraints(sla_p99_ms, min_throughput, max_memory_mb, max_accuracy_drop),
            weights=parse_weights(weights),
            measure=MeasureSettings(sla_p99_ms, client_batch=client_batch, window_ms=window_ms, max_windows=max_windows,
                                    warmup_requests=warmup, closed_concurrency=concurrency, rate_steps=rate_steps),
            targets=split_list(to), precisions=split_list(precision), batchings=parse_batching(batching),
            instances=parse_ints(instances, "--instances"), threads=parse_ints(threads, "--threads"),
            front_doors=split_list(front_doors), peers=() if peers.strip() in ("", "none") else split_list(peers),
            peers_dir=peers_dir, budget_fraction=budget, keep_runtimes=keep_runtimes, inprocess_s=inprocess_s,
            time_budget_s=time_budget_min * 60 if time_budget_min > 0 else None,
            exhaustive=exhaustive, qualitative=qualitative,
            convert_options={"inputs": [parse_input_option(i) for i in inputs or []] or None,
                             "calibration_samples": calibration_samples, "max_batch_size": max_batch_size},
        )  # fmt: skip
        result = run_select(spec, lambda m: console.print(f"[dim]{m}[/]"))
        paths = write_reports(result, report)
    except ServelabError as exc:
        console.print(f"[red]error:[/] {exc.message}")
        raise typer.Exit(code=2) from None
    _print(result)
    winner = result.decision.winner
    console.print(f"report: {paths['html']} and {paths['markdown']}")
    if winner is None:
        console.print("[red]no configuration meets every constraint[/]; see the verdicts")
        raise typer.Exit(code=1)
    console.print(f"[green]selected[/] {winner.label}: {winner.max_rate:,.0f} req/s within P99 {sla_p99_ms:g} ms; "
                  f"config: {result.config_path}")  # fmt: skip
    console.print(f"serve it: servelab serve {repo} --model-control-mode explicit --load-model {result.converted.name}")


def register(app: typer.Typer) -> None:
    """Add ``select`` to the root app."""
    app.command("select")(select_command)
