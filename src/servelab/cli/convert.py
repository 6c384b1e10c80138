"""`servelab convert SOURCE --to onnx,torchscript,openvino --precision fp32,fp16,int8 --out REPO`.

Every artefact lands in REPO as a servable model with its config.pbtxt and is checked against SOURCE;
the table says which passed, which were rejected (with the figures) and which the model cannot take.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from servelab.errors import ServelabError

__all__ = ["convert_command", "print_artefacts", "register", "split_list"]

console = Console()
if not console.is_terminal:
    console = Console(width=160)

_STATUS_STYLE = {"accepted": "green", "rejected": "red", "skipped": "yellow"}


def split_list(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def print_artefacts(result: object) -> None:
    """One row per artefact: status, parity figures, size, and the reason where there is one."""
    table = Table(title=f"servelab convert: {result.name} ({result.source.kind}); inputs: {result.data_source}")  # type: ignore[attr-defined]
    for col in ("model", "precision", "status", "parity", "MB", "reason"):
        table.add_column(col, overflow="fold")
    for a in result.artefacts:  # type: ignore[attr-defined]
        style = _STATUS_STYLE[a.status]
        table.add_row(
            a.model, a.precision, f"[{style}]{a.status}[/]", a.parity.summary() if a.parity else "-",
            f"{a.size_bytes / 2**20:.1f}" if a.size_bytes else "-", a.reason or "",
        )  # fmt: skip
    console.print(table)
    if result.onnx is not None:  # type: ignore[attr-defined]
        console.print(f"ONNX: {result.onnx.describe()}")  # type: ignore[attr-defined]
    console.print(f"manifest: {result.manifest}")  # type: ignore[attr-defined]


def convert_command(
    source: Annotated[str, typer.Argument(help="TorchScript .pt, torch.export .pt2, model.py[:factory], .onnx, "
                                               "or a scikit-learn/LightGBM/XGBoost model (.pkl/.joblib, .txt, .json).")],
    out: Annotated[Path, typer.Option("--out", help="Model repository to write the artefacts into.")] = Path("out/converted"),
    to: Annotated[str, typer.Option("--to", help="Targets: onnx,torchscript,torch_export,openvino,tensorrt.")] = "onnx,torchscript,openvino",
    precision: Annotated[str, typer.Option("--precision", help="fp32,fp16,int8 (dynamic),int8-static (calibrated).")] = "fp32",
    name: Annotated[str | None, typer.Option("--name", help="Model name prefix (default: the file's stem).")] = None,
    inputs: Annotated[list[str] | None, typer.Option("--input", help="NAME:DTYPE:dims per input, batch axis excluded (TorchScript needs it).")] = None,
    outputs: Annotated[str | None, typer.Option("--output-names", help="Comma list of output names.")] = None,
    dynamic_axes: Annotated[list[str] | None, typer.Option("--dynamic-axes", help="NAME:0,1 (default: axis 0 of every tensor).")] = None,
    data: Annotated[Path | None, typer.Option("--data", help="Parity inputs: .npz, .json requests, .csv/.parquet table.")] = None,
    calibration: Annotated[Path | None, typer.Option("--calibration", help="Calibration samples for int8-static (default: --data).")] = None,
    calibration_samples: Annotated[int, typer.Option("--calibration-samples", help="How many calibration samples to use.")] = 64,
    parity_samples: Annotated[int, typer.Option("--parity-samples", help="How many samples the parity check runs.")] = 64,
    tolerance: Annotated[list[str] | None, typer.Option("--tolerance", help="PRECISION=REL[/TOP1], e.g. int8=0.05/0.95.")] = None,
    max_batch_size: Annotated[int, typer.Option("--max-batch-size", help="max_batch_size of the written configs.")] = 32,
    classifier: Annotated[bool, typer.Option("--classifier", help="Judge by top-1 agreement (torch/ONNX sources).")] = False,
) -> None:  # fmt: skip
    """Convert SOURCE to each target x precision, check each against SOURCE, and write a servable repository."""
    from servelab.convert.parity import parse_tolerances
    from servelab.convert.pipeline import ConvertSpec, convert
    from servelab.convert.sources import parse_input_option
    from servelab.convert.to_onnx import parse_dynamic_axes

    try:
        spec = ConvertSpec(
            source=source, out=out, name=name, targets=split_list(to), precisions=split_list(precision),
            inputs=[parse_input_option(i) for i in inputs or []] or None,
            output_names=list(split_list(outputs)) if outputs else None,
            dynamic_axes=parse_dynamic_axes(dynamic_axes) if dynamic_axes else None, data=data,
            calibration=calibration, calibration_samples=calibration_samples, parity_samples=parity_samples,
            tolerances=parse_tolerances(tolerance or []), max_batch_size=max_batch_size,
            task="classifier" if classifier else "other",
        )  # fmt: skip
        result = convert(spec, lambda m: console.print(f"[dim]{m}[/]"))
    except ServelabError as exc:
        console.print(f"[red]error:[/] {exc.message}")
        raise typer.Exit(code=2) from None
    print_artefacts(result)
    if not result.accepted():
        raise typer.Exit(code=1)


def register(app: typer.Typer) -> None:
    """Add ``convert`` to the root app."""
    app.command("convert")(convert_command)
