"""``servelab convert``: a source to every asked-for target x precision, each checked against the source.

The artefacts land as models of a Triton-layout repository (``<out>/<name>_<target>_<precision>``), so
``servelab serve <out>`` serves them all and ``servelab select`` measures them. An artefact that fails
its parity gate goes to ``<out>/_rejected/`` (the repository scan skips ``_`` folders) with its figures;
one the model cannot take is listed as skipped with the reason. ``<out>/<name>.convert.json`` holds it all.

Parity runs each artefact through the servelab backend that will serve it (same config, same parameters),
not through the runtime alone, so what passed here is what the server computes.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from servelab.backends import backend_class
from servelab.backends.base import BackendContext
from servelab.convert.artefacts import TARGETS, Made, MakeContext, make_artefact
from servelab.convert.layout import BACKEND_OF, model_config, write_model
from servelab.convert.parity import DEFAULT_TOLERANCES, Parity, Tolerance, compare_outputs
from servelab.convert.samples import Sample, feeds, generate_samples, load_samples
from servelab.convert.sources import Source, Task, TensorInfo, load_source
from servelab.convert.to_onnx import OnnxExport, export_source_onnx
from servelab.errors import InvalidArgument, ServelabError
from servelab.protocol import model_config_pb2 as mc
from servelab.types import DataType

__all__ = ["PRECISIONS", "Artefact", "ConvertResult", "ConvertSpec", "convert"]

PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8", "int8-static")
Status = Literal["accepted", "rejected", "skipped"]
Progress = Callable[[str], None]


@dataclass
class ConvertSpec:
    """What to convert, to what, and how strictly to check it."""

    source: str
    out: Path
    name: str | None = None
    targets: tuple[str, ...] = ("onnx", "torchscript", "openvino")
    precisions: tuple[str, ...] = ("fp32",)
    inputs: list[TensorInfo] | None = None
    output_names: list[str] | None = None
    dynamic_axes: dict[str, dict[int, str]] | None = None
    data: Path | None = None
    calibration: Path | None = None
    calibration_samples: int = 64
    parity_samples: int = 64
    tolerances: dict[str, Tolerance] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    max_batch_size: int = 32
    task: Task = "other"
    seed: int = 0

    def __post_init__(self) -> None:
        bad = [t for t in self.targets if t not in TARGETS]
        if bad or not self.targets:
            raise InvalidArgument(f"--to {list(self.targets)}: expected some of {list(TARGETS)}")
        bad = [p for p in self.precisions if p not in PRECISIONS]
        if bad or not self.precisions:
            raise InvalidArgument(f"--precision {list(self.precisions)}: expected some of {list(PRECISIONS)}")
        if self.calibration_samples < 1 or self.parity_samples < 1 or self.max_batch_size < 0:
            raise InvalidArgument("calibration and parity sample counts must be >= 1 and max_batch_size >= 0")


@dataclass
class Artefact:
    """One target x precision: where it is, whether it passed, and the figures."""

    model: str
    target: str
    precision: str
    status: Status
    reason: str = ""
    folder: Path | None = None
    parity: Parity | None = None
    seconds: float = 0.0
    size_bytes: int = 0

    @property
    def backend(self) -> str:
        return BACKEND_OF[self.target]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "target": self.target, "backend": self.backend, "precision": self.precision,
            "status": self.status, "reason": self.reason, "folder": str(self.folder) if self.folder else None,
            "parity": self.parity.to_dict() if self.parity else None, "seconds": round(self.seconds, 3),
            "size_bytes": self.size_bytes,
        }  # fmt: skip


@dataclass
class ConvertResult:
    name: str
    source: Source
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    onnx: OnnxExport | None
    artefacts: list[Artefact]
    data_source: str
    repository: Path
    max_batch_size: int = 0
    manifest: Path | None = None

    def accepted(self) -> list[Artefact]:
        return [a for a in self.artefacts if a.status == "accepted"]

    def to_dict(self) -> dict[str, Any]:
        def tensors(ts: list[TensorInfo]) -> list[dict[str, Any]]:
            return [{"name": t.name, "datatype": t.dtype.value, "shape": list(t.shape)} for t in ts]

        return {
            "name": self.name, "source": {"kind": self.source.kind, "path": str(self.source.path), "task": self.source.task},
            "inputs": tensors(self.inputs), "outputs": tensors(self.outputs), "data": self.data_source,
            "max_batch_size": self.max_batch_size,
            "onnx": {"opset": self.onnx.opset, "tried": self.onnx.tried} if self.onnx else None,
            "artefacts": [a.to_dict() for a in self.artefacts],
        }  # fmt: skip


def _output_infos(names: list[str], arrays: list[np.ndarray]) -> list[TensorInfo]:
    return [
        TensorInfo(n, DataType.parse(_oip_name(a.dtype)), (-1, *a.shape[1:])) for n, a in zip(names, arrays, strict=True)
    ]


def _oip_name(dtype: np.dtype[Any]) -> str:
    names = {"float32": "FP32", "float16": "FP16", "float64": "FP64", "int64": "INT64", "int32": "INT32",
             "int8": "INT8", "uint8": "UINT8", "bool": "BOOL", "int16": "INT16"}  # fmt: skip
    if str(dtype) not in names:
        raise InvalidArgument(f"the source returns a {dtype} output, which servelab cannot serve")
    return names[str(dtype)]


Feed = dict[str, np.ndarray]


def _run_backend(config: mc.ModelConfig, version_dir: Path, calls: list[Feed]) -> dict[str, np.ndarray]:
    """The artefact through the servelab backend that serves it, one call per feed (a batch of at most
    max_batch_size rows, or a whole request); outputs joined along their first axis."""
    backend = backend_class(config.backend)(BackendContext(config.name, 1, version_dir, config, threads=1))
    backend.load()
    try:
        parts = [backend.infer(feed) for feed in calls]
    finally:
        backend.unload()
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def _reference(source: Source, calls: list[Feed]) -> list[np.ndarray]:
    parts = [source.reference(feed) for feed in calls]
    return [np.concatenate([p[i] for p in parts]) for i in range(len(parts[0]))]


def _unbatched_axes(source: Source) -> dict[str, dict[int, str]]:
    """Export axes of a model that does not batch: each tensor's dynamic dims named apart (default axis 0)."""
    axes = {t.name: {i: f"{t.name}_{i}" for i, d in enumerate(t.shape) if d < 0} for t in source.inputs}
    return axes | {name: {0: f"{name}_0"} for name in source.output_names}


class _Converter:
    def __init__(self, spec: ConvertSpec, progress: Progress) -> None:
        self.spec = spec
        self.say = progress
        self.source = load_source(spec.source, spec.inputs, spec.output_names, spec.task)
        self.name = spec.name or Path(spec.source.split(".py:")[0]).stem
        #: whether the model batches: not when the source says so, nor with --max-batch-size 0
        self.batched = spec.max_batch_size > 0 and self.source.batches
        self.max_batch_size = spec.max_batch_size if self.batched else 0
        self.samples, self.data_source = self._samples()
        self.calls = feeds(self.samples, self.batched, self.max_batch_size)
        self.reference = _reference(self.source, self.calls)
        self.outputs = _output_infos(self.source.output_names, self.reference)

    def _load(self, path: Path, limit: int) -> list[Sample]:
        return load_samples(path, self.source.inputs, limit, batched=self.batched)

    def _generated(self, count: int, seed: int) -> tuple[list[Sample], str]:
        if self.batched:
            return generate_samples(self.source.inputs, count, seed), "generated (random)"
        if self.source.examples is None:
            raise InvalidArgument(
                f"{self.source.path}: a model that does not batch takes whole requests; give --data (an .npz with "
                "one array per input) or define example_inputs() in the source file"
            )
        names = [t.name for t in self.source.inputs]
        return [dict(zip(names, self.source.examples, strict=True))], "generated: the source's example_inputs()"

    def _samples(self) -> tuple[list[Sample], str]:
        spec = self.spec
        if spec.data is not None:
            return self._load(spec.data, spec.parity_samples), f"file {spec.data}"
        return self._generated(spec.parity_samples, spec.seed)

    def calibration(self) -> list[Sample]:
        spec = self.spec
        if spec.calibration is not None:
            return self._load(spec.calibration, spec.calibration_samples)
        if spec.data is not None:
            return self._load(spec.data, spec.calibration_samples)
        return self._generated(spec.calibration_samples, spec.seed + 1)[0]

    def export_onnx(self, work: Path) -> tuple[OnnxExport | None, str]:
        if not {"onnx", "openvino", "tensorrt"} & set(self.spec.targets):
            return None, ""
        axes = self.spec.dynamic_axes or self.source.dynamic_axes or (None if self.batched else _unbatched_axes(self.source))
        try:
            exported = export_source_onnx(self.source, work / "onnx" / "model.onnx", axes)
        except ServelabError as exc:
            return None, exc.message
        self.say(f"ONNX export: {exported.describe()}")
        return exported, ""

    def one(self, ctx: MakeContext, target: str, precision: str, work: Path) -> Artefact:
        model = f"{self.name}_{target}_{precision}".replace("-", "_")
        started = time.perf_counter()
        try:
            made = make_artefact(ctx, target, precision, work / model)
        except Exception as exc:  # a converter's own failure is this artefact's, not the run's
            made = Made(skipped=f"conversion failed: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__}")
        if made.skipped:
            return Artefact(model, target, precision, "skipped", made.skipped, seconds=time.perf_counter() - started)
        config = model_config(model, target, self.source.inputs, self.outputs, self.max_batch_size, made.parameters)
        folder = write_model(self.spec.out, config, made.files)
        artefact = Artefact(model, target, precision, "accepted", made.note, folder, seconds=time.perf_counter() - started)
        artefact.size_bytes = sum(f.stat().st_size for f in (folder / "1").rglob("*") if f.is_file())
        self._check(artefact, config, folder)
        return artefact

    def _check(self, artefact: Artefact, config: mc.ModelConfig, folder: Path) -> None:
        tolerance = self.spec.tolerances[artefact.precision]
        try:
            produced = _run_backend(config, folder / "1", self.calls)
        except Exception as exc:  # the server could not load or run it: as rejected as a wrong answer
            artefact.parity = Parity(len(self.samples), tolerance, passed=False, reasons=[f"the {config.backend} backend failed: {exc}"])
        else:
            artefact.parity = compare_outputs(
                self.source.output_names, self.reference, produced, tolerance, self.source.task == "classifier"
            )
        if not artefact.parity.passed:
            artefact.status = "rejected"
            artefact.reason = "; ".join(filter(None, [*artefact.parity.reasons, artefact.reason]))
            rejected = self.spec.out / "_rejected" / folder.name
            if rejected.exists():
                shutil.rmtree(rejected)
            rejected.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(folder), str(rejected))
            artefact.folder = rejected


def convert(spec: ConvertSpec, progress: Progress | None = None) -> ConvertResult:
    """Make, lay out and check every target x precision of ``spec``; write the manifest."""
    say = progress or (lambda _m: None)
    conv = _Converter(spec, say)
    spec.out.mkdir(parents=True, exist_ok=True)
    artefacts: list[Artefact] = []
    with tempfile.TemporaryDirectory(prefix="servelab-convert-") as tmp:
        work = Path(tmp)
        exported, why = conv.export_onnx(work)
        needs_calibration = any(p == "int8-static" for p in spec.precisions)
        ctx = MakeContext(conv.source, work, exported.path if exported else None,
                          conv.calibration() if needs_calibration else [], conv.max_batch_size)  # fmt: skip
        for target in spec.targets:
            for precision in spec.precisions:
                if why and target in ("onnx", "openvino", "tensorrt"):
                    artefacts.append(Artefact(f"{conv.name}_{target}_{precision}", target, precision, "skipped",
                                              f"ONNX export failed: {why}"))  # fmt: skip
                    say(_line(artefacts[-1]))
                    continue
                artefact = conv.one(ctx, target, precision, work)
                artefacts.append(artefact)
                say(_line(artefact))
    result = ConvertResult(conv.name, conv.source, conv.source.inputs, conv.outputs, exported, artefacts,
                           conv.data_source, spec.out, conv.max_batch_size)  # fmt: skip
    result.manifest = spec.out / f"{conv.name}.convert.json"
    result.manifest.write_text(json.dumps(result.to_dict(), indent=2, default=str))
    if not conv.batched:  # the request it was checked on: select measures on it when given no --data
        np.savez(spec.out / f"{conv.name}.request.npz", **conv.samples[0])  # type: ignore[arg-type]
    return result


def _line(a: Artefact) -> str:
    figures = f" ({a.parity.summary()})" if a.parity else ""
    reason = f": {a.reason}" if a.reason else ""
    return f"{a.target} {a.precision}: {a.status}{figures}{reason}"
