"""`servelab compare MODEL --repo REPO --targets ...`: one model, one load, several servers and runtimes.

Peers (TorchServe, MLServer, Triton) and perf_analyzer (``--client perf_analyzer``) install under
``--peers-dir`` on first use.
``demo_compare(repo)`` is the short version ``make demo`` ends with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from servelab.cli._extras import require_extra
from servelab.errors import ServelabError

__all__ = ["compare", "demo_compare", "print_table", "register", "results_markdown"]

console = Console()
if not console.is_terminal:
    console = Console(width=150)

DEFAULT_TARGETS = (
    "servelab-onnxruntime,servelab-openvino,servelab-torch,inprocess-ort,fastapi-ort,torchserve,mlserver"
)


def _int_list(text: str, option: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{option} expects whole numbers separated by commas, got {text!r}"
        ) from None


#: the columns ``make demo`` leaves out to fit 120 columns: every demo target but in-process is over HTTP, and
#: req/s is inf/s over the batch shown
DEMO_LEFT_OUT = ("protocol", "req/s")


def print_table(result: object, out: Console | None = None, leave_out: tuple[str, ...] = ()) -> None:
    """The comparison as a Rich table (less the ``leave_out`` columns), then the targets not measured."""
    from servelab.bench.peers.compare_report import COLUMNS, row_cells

    out = out or console
    columns = tuple(c for c in COLUMNS if c not in leave_out)

    spec = result.spec  # type: ignore[attr-defined]
    table = Table(
        title=f"servelab compare: {spec.model}, concurrency {spec.concurrency}, baseline {spec.baseline or '-'}, "
        f"median of {spec.rounds} alternating round(s)"
        + ("" if spec.client == "builtin" else f", client {spec.client}")
    )
    for col in columns:
        table.add_column(col, justify="left" if col in ("target", "protocol") else "right")
    for row in result.rows():  # type: ignore[attr-defined]
        table.add_row(*row_cells(row, columns))
    out.print(table)
    for o in result.outcomes:  # type: ignore[attr-defined]
        if o.error:
            out.print(f"[yellow]not measured[/] {o.label}: {o.error}")


def _rounds_sentence(rounds: int) -> str:
    return (
        f" {rounds} rounds, each measuring every target at every batch size once, one at a time, the order "
        "reversed on every other round so that the machine's drift hits all targets alike. A row shows its "
        "median round by inf/s (P50 and P99 of that round) and `inf/s min-max` the spread over the rounds; "
        "`x thr` and `x P50` are taken against the baseline of the same round, then their median is shown."
    )


def results_markdown(doc: dict[str, Any]) -> str:
    """The comparison as a section of benchmarks/RESULTS.md, from its JSON document (``--output``).

    A document written before compare had rounds (no ``settings.rounds``) renders as it did then."""
    from servelab.bench.compare import CompareRow
    from servelab.bench.peers.compare_report import COLUMNS, ONE_ROUND_COLUMNS, row_cells
    from servelab.bench.results_md import markdown_table

    s = doc["settings"]
    rounds = s.get("rounds")
    head = (
        f"`servelab compare {doc['model']}`: concurrency {s['concurrency']}, client batch sizes "
        f"{', '.join(str(b) for b in s['batch_sizes'])}, baseline {s['baseline'] or '-'}, windows of "
        f"{s['measurement_interval_ms']} ms (at most {s['max_windows']} per point)"
        + (f", measured by {s['client']}" if s.get("client", "builtin") != "builtin" else "")
        + "."
        + ("" if rounds is None else _rounds_sentence(int(rounds)))
        + "\n\n"
    )
    columns = ONE_ROUND_COLUMNS if rounds is None else COLUMNS
    table = markdown_table(columns, (row_cells(CompareRow(**r), columns) for r in doc["rows"]))
    missing = [f"- not measured: {t['label']}: {t['error']}\n" for t in doc["targets"] if t.get("error")]
    return head + table + ("\n" + "".join(missing) if missing else "")


def _run(
    spec: object, output: Path | None, html: Path | None, results_md: tuple[Path, str] | None = None,
    out: Console | None = None, leave_out: tuple[str, ...] = (),
) -> object:
    from servelab.bench.compare import run_compare
    from servelab.bench.peers.compare_report import write_html

    result = run_compare(spec, lambda m: console.print(f"[dim]{m}[/]"))  # type: ignore[arg-type]
    print_table(result, out, leave_out)
    if output is not None:
        result.write_json(output)
        console.print(f"JSON: {output}")
    if html is not None:
        write_html(result, html)
        console.print(f"HTML: {html}")
    if results_md is not None:
        from servelab.bench.results_md import write_section

        doc = json.loads(json.dumps(result.to_dict(), default=str))  # type: ignore[attr-defined]  # as in the JSON
        write_section(results_md[0], results_md[1], results_markdown(doc))
        console.print(f"section {results_md[1]!r} of {results_md[0]}")
    return result


def compare(
    model: Annotated[
        str,
        typer.Argument(
            help="Model (family) name in the repository, e.g. mlp for mlp_onnx, mlp_torchscript..."
        ),
    ],
    repo: Annotated[Path, typer.Option("--repo", help="Model repository (Triton layout).")] = Path(
        "examples/repository"
    ),
    targets: Annotated[
        str,
        typer.Option(
            "--targets",
            help="Comma-separated: "
            + DEFAULT_TARGETS
            + ", servelab-python, triton (Triton 2.51, python backend), oip=URL; '@grpc' picks gRPC for "
            "servelab-*/mlserver/triton.",
        ),
    ] = DEFAULT_TARGETS,
    batch_sizes: Annotated[str, typer.Option("--batch-sizes", help="Client batch sizes.")] = "1,32",
    concurrency: Annotated[int, typer.Option("--concurrency", help="Concurrent requests in flight.")] = 8,
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="Target the ratios are taken against.")
    ] = "inprocess-ort",
    protocol: Annotated[
        str, typer.Option("--protocol", help="OIP transport for servelab-*/mlserver: http | grpc.")
    ] = "http",
    interval_ms: Annotated[int, typer.Option("--measurement-interval-ms", help="Window length.")] = 2000,
    max_windows: Annotated[
        int, typer.Option("--max-windows", help="Windows per point before giving up on stability (>= 3).")
    ] = 5,
    rounds: Annotated[
        int,
        typer.Option(
            "--rounds",
            help="Alternating rounds: each measures every target at every batch size once, the order reversed "
            "on every other round; rows show the median round and the median per-round ratio.",
        ),
    ] = 3,
    output: Annotated[Path | None, typer.Option("--output", help="Write the results as JSON.")] = None,
    html: Annotated[Path | None, typer.Option("--html", help="Write an HTML report.")] = None,
    results_md: Annotated[
        Path | None, typer.Option("--results-md", help="Rewrite a marked section of this file (RESULTS.md).")
    ] = None,
    results_section: Annotated[
        str, typer.Option("--results-section", help="Name of that section.")
    ] = "compare",
    peers_dir: Annotated[Path, typer.Option("--peers-dir", help="Where peers' own venvs live.")] = Path(
        ".peers"
    ),
    ts_batch_size: Annotated[int, typer.Option("--torchserve-batch-size", help="TorchServe batch_size.")] = 8,
    ts_delay_ms: Annotated[
        int, typer.Option("--torchserve-max-batch-delay-ms", help="TorchServe max_batch_delay.")
    ] = 5,
    ts_workers: Annotated[
        int, typer.Option("--torchserve-workers", help="TorchServe workers for the model.")
    ] = 1,
    mls_batch: Annotated[
        int, typer.Option("--mlserver-max-batch-size", help="MLServer adaptive batching size (1 = off).")
    ] = 8,
    mls_time_s: Annotated[
        float, typer.Option("--mlserver-max-batch-time-s", help="MLServer max_batch_time.")
    ] = 0.002,
    mls_workers: Annotated[
        int, typer.Option("--mlserver-parallel-workers", help="MLServer parallel_workers.")
    ] = 0,
    client: Annotated[
        str,
        typer.Option(
            "--client",
            help="Load generator: builtin | perf_analyzer (Triton's, 2.40; OIP targets only; installed in "
            "--peers-dir on first use).",
        ),
    ] = "builtin",
) -> None:
    """Measure MODEL on several servers and runtimes under one load; print P50/P99/throughput/RSS and ratios."""
    require_extra("bench", "compare")
    from servelab.bench.compare import CompareSpec
    from servelab.bench.peers.targets import PeerSettings, parse_targets

    try:
        choices = parse_targets(targets, protocol)
        if baseline is not None and baseline not in [c.label for c in choices]:
            baseline = None if baseline == "inprocess-ort" else baseline
        peers = PeerSettings(
            peers_dir=peers_dir, torchserve_batch_size=ts_batch_size, torchserve_max_batch_delay_ms=ts_delay_ms,
            torchserve_workers=ts_workers, mlserver_max_batch_size=mls_batch, mlserver_max_batch_time_s=mls_time_s,
            mlserver_parallel_workers=mls_workers,
        )  # fmt: skip
        spec = CompareSpec(
            model=model, repository=repo, targets=tuple(choices), batch_sizes=_int_list(batch_sizes, "--batch-sizes"),
            concurrency=concurrency, baseline=baseline, measurement_interval_ms=interval_ms, max_windows=max_windows,
            peers=peers, client=client, rounds=rounds,
        )  # fmt: skip
        _run(spec, output, html, None if results_md is None else (results_md, results_section))
    except ServelabError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(code=2) from None


def demo_compare(
    repo: Path, html: Path = Path("out/compare.html"), model: str = "mlp", out: Console | None = None
) -> object:
    """A short compare for ``make demo``: servelab on each backend, in-process ORT and FastAPI+ORT,
    batch 1 and 32, about a second per point, two alternating rounds (the fewest that alternate; well
    under three minutes on two cores)."""
    require_extra("bench", "demo")
    from servelab.bench.compare import CompareSpec
    from servelab.bench.peers.targets import parse_targets

    spec = CompareSpec(
        model=model, repository=repo,
        targets=tuple(parse_targets("inprocess-ort,servelab-onnxruntime,servelab-openvino,servelab-torch,fastapi-ort")),
        batch_sizes=(1, 32), concurrency=8, baseline="inprocess-ort", measurement_interval_ms=500, max_windows=3,
        warmup_requests=20, max_level_s=20.0, rounds=2,
    )  # fmt: skip
    return _run(spec, html.with_suffix(".json"), html, out=out, leave_out=DEMO_LEFT_OUT)


def register(app: typer.Typer) -> None:
    """Add ``compare`` to the root app."""
    app.command("compare")(compare)
