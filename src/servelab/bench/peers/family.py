"""One model in several runtimes, found in a Triton-layout repository by name.

``find_family(repo, "mlp")`` collects the repository models named ``mlp`` or ``mlp_*`` (and, given
``mlp_onnx``, its siblings ``mlp_*``), reads each ``config.pbtxt`` with the generated ModelConfig
message, and says which runtime each one is for and where its newest model file lies. Peers then get
the same weights in the format they serve: ONNX for ORT-based peers, TorchScript for TorchServe, a
python-backend ``model.py`` (its folder) for Triton.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format

from servelab.bench.peers.base import ModelArtefacts, TensorInfo
from servelab.errors import InvalidArgument, NotFound
from servelab.protocol import model_config_pb2

__all__ = ["RUNTIMES", "Family", "Member", "find_family"]

RUNTIMES: dict[str, str] = {
    "onnxruntime": "model.onnx", "torch": "model.pt", "openvino": "model.xml", "python": "model.py",
}  # fmt: skip
_PLATFORMS = {
    "onnxruntime_onnx": "onnxruntime", "onnxruntime": "onnxruntime", "pytorch_libtorch": "torch",
    "pytorch": "torch", "torch": "torch", "libtorch": "torch", "openvino": "openvino", "python": "python",
}  # fmt: skip
_SUFFIXES = ("onnx", "ort", "onnxruntime", "torchscript", "torch", "pytorch", "pt", "openvino", "ov")


@dataclass(frozen=True, slots=True)
class Member:
    """One repository model of the family."""

    name: str
    runtime: str
    model_file: Path | None
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    max_batch_size: int


@dataclass
class Family:
    base: str
    repository: Path
    members: dict[str, Member] = field(default_factory=dict)

    def member(self, runtime: str) -> Member:
        if runtime not in self.members:
            have = {r: m.name for r, m in self.members.items()}
            raise NotFound(
                f"no {runtime} model of {self.base!r} in {self.repository} (found {have or 'none'})"
            )
        return self.members[runtime]

    def artefacts(self, runtime: str) -> ModelArtefacts:
        """The family's artefacts, I/O names as the ``runtime`` member declares them."""
        m = self.member(runtime)
        onnx, pt, py = (self.members.get(r) for r in ("onnxruntime", "torch", "python"))
        return ModelArtefacts(
            name=self.base, inputs=m.inputs, outputs=m.outputs, max_batch_size=m.max_batch_size,
            onnx=onnx.model_file if onnx else None, torchscript=pt.model_file if pt else None,
            python_model=py.model_file.parent.parent if py and py.model_file else None,
        )  # fmt: skip


def _tensors(entries: object) -> tuple[TensorInfo, ...]:
    out = []
    for t in entries:  # type: ignore[attr-defined]
        dtype = model_config_pb2.DataType.Name(t.data_type).removeprefix("TYPE_")
        out.append(TensorInfo(t.name, "BYTES" if dtype == "STRING" else dtype, tuple(int(d) for d in t.dims)))
    return tuple(out)


def _newest_file(folder: Path, filename: str) -> Path | None:
    versions = sorted((int(p.name), p) for p in folder.iterdir() if p.is_dir() and p.name.isdigit())
    for _, vdir in reversed(versions):
        if (vdir / filename).is_file():
            return (vdir / filename).resolve()
    return None


def _read_member(folder: Path) -> Member | None:
    cfg_path = folder / "config.pbtxt"
    if not cfg_path.is_file():
        return None
    cfg = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(cfg_path.read_text(), cfg)
    except text_format.ParseError as exc:
        raise InvalidArgument(f"{cfg_path}: {exc}") from exc
    runtime = _PLATFORMS.get(cfg.backend or cfg.platform)
    if runtime is None:
        return None
    return Member(
        name=cfg.name or folder.name, runtime=runtime, model_file=_newest_file(folder, RUNTIMES[runtime]),
        inputs=_tensors(cfg.input), outputs=_tensors(cfg.output), max_batch_size=int(cfg.max_batch_size),
    )  # fmt: skip


def _base_name(model: str, names: set[str]) -> str:
    if model in names and "_" in model:
        head, tail = model.rsplit("_", 1)
        if tail in _SUFFIXES:
            return head
    return model


def find_family(repository: Path, model: str) -> Family:
    """The runtimes of ``model`` in ``repository``; NotFound listing the repository when none match."""
    if not repository.is_dir():
        raise NotFound(f"model repository {repository} is not a folder")
    folders = {p.name: p for p in repository.iterdir() if p.is_dir()}
    base = _base_name(model, set(folders))
    family = Family(base=base, repository=repository.resolve())
    for name in sorted(folders):
        if name != base and not name.startswith(base + "_"):
            continue
        member = _read_member(folders[name])
        if member is not None and member.runtime not in family.members:
            family.members[member.runtime] = member
    if not family.members:
        raise NotFound(
            f"no model named {model!r} (or {base}_<runtime>) with an ONNX, TorchScript, OpenVINO or python config in "
            f"{repository}; models there: {sorted(folders)}"
        )
    return family
