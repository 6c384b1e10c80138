"""``servelab check-triton``: would each model of a repository load unchanged on Triton Inference Server?

A static reading, model by model: the config is parsed with Triton's own ModelConfig (servelab's
model_config.proto is Triton's, byte for byte), so a field that parses is a field Triton knows; what is
checked on top is what servelab accepts and Triton does not: backends and platforms Triton has no
backend for, servelab's own plug-ins and ``module:Class`` backends, the ``torch.export`` platform,
TorchScript tensor names outside Triton's ``NAME__<index>`` rule, python models written against
servelab's dict-style API instead of ``triton_python_backend_utils``, a missing config.pbtxt where
Triton cannot auto-complete, and parameters only servelab reads (Triton ignores them).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from servelab.errors import ServelabError
from servelab.protocol import model_config_pb2 as mc
from servelab.repository import ModelRepository
from servelab.repository.config import read_config
from servelab.repository.repository import resolve_backend

__all__ = ["ModelVerdict", "Verdict", "check_repository"]

#: Triton's backends (triton-inference-server/backend README's list) and platforms (model_config.proto)
TRITON_BACKENDS = frozenset({
    "onnxruntime", "pytorch", "tensorflow", "tensorrt", "openvino", "python", "dali", "fil", "identity",
    "repeat", "square", "vllm", "tensorrtllm",
})  # fmt: skip
TRITON_PLATFORMS = frozenset({
    "tensorrt_plan", "tensorflow_graphdef", "tensorflow_savedmodel", "onnxruntime_onnx", "pytorch_libtorch",
    "ensemble",
})  # fmt: skip
#: backends whose models Triton completes without a config.pbtxt (its auto-complete)
_AUTO_COMPLETES = frozenset({"onnxruntime", "tensorflow", "tensorrt"})
#: parameters keys servelab reads that no Triton backend does (Triton ignores unknown keys)
SERVELAB_PARAMETERS = frozenset({
    "instance_mode", "inline_execution_us", "idle_inline_execution_us", "execution_providers", "execute_never_blocks",
})  # fmt: skip
_TORCH_NAME = re.compile(r"^.+__\d+$")


class Verdict(str, Enum):
    OK = "ok"  #: loads unchanged
    NOTE = "note"  #: loads; something behaves differently (said in the notes)
    CHANGE = "change"  #: does not load on Triton as it is


@dataclass
class ModelVerdict:
    name: str
    backend: str
    verdict: Verdict = Verdict.OK
    notes: list[str] = field(default_factory=list)

    def change(self, note: str) -> None:
        self.verdict = Verdict.CHANGE
        self.notes.append(note)

    def note(self, note: str) -> None:
        if self.verdict is Verdict.OK:
            self.verdict = Verdict.NOTE
        self.notes.append(note)


def _version_dirs(directory: Path) -> list[Path]:
    return sorted((p for p in directory.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))


def _uses_pb_utils(model_py: Path) -> bool:
    try:
        tree = ast.parse(model_py.read_text(errors="replace"))
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "triton_python_backend_utils" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "triton_python_backend_utils":
            return True
    return False


def _check_backend(v: ModelVerdict, config: mc.ModelConfig, versions: list[Path]) -> None:
    if ":" in v.backend:
        v.change(f"backend {v.backend!r} is a servelab custom backend (module:Class); Triton needs a C++ or python "
                 "backend: wrap the class in a python-backend model.py")
    elif config.platform == "torch_export":
        v.change("platform 'torch_export' (model.pt2) is servelab's; export TorchScript (model.pt) and use "
                 "platform: \"pytorch_libtorch\"")
    elif config.platform and config.platform not in TRITON_PLATFORMS:
        v.change(f"platform {config.platform!r} is unknown to Triton; expected one of {sorted(TRITON_PLATFORMS)}")
    elif v.backend not in TRITON_BACKENDS and v.backend != "ensemble":
        v.change(f"backend {v.backend!r} is a servelab plug-in; Triton has no such backend")
    if v.backend == "openvino" and versions and not (versions[-1] / (config.default_model_filename or "model.xml")).exists():
        v.note("Triton's OpenVINO backend reads model.xml by default; set default_model_filename for other formats")


def _check_tensors(v: ModelVerdict, config: mc.ModelConfig) -> None:
    if v.backend != "pytorch" or config.platform == "torch_export":
        return
    names = [t.name for t in (*config.input, *config.output)]
    bad = [n for n in names if not _TORCH_NAME.match(n)]
    if bad and any(t.name in bad for t in config.output):
        v.change(f"TorchScript outputs {bad} do not follow Triton's <name>__<index> rule (e.g. OUTPUT__0); rename them")
    elif bad:
        v.note(f"TorchScript inputs {bad} must match forward()'s argument names on Triton (or use <name>__<index>)")


def _check_python(v: ModelVerdict, versions: list[Path]) -> None:
    if v.backend != "python" or not versions:
        return
    model_py = versions[-1] / "model.py"
    if model_py.exists() and not _uses_pb_utils(model_py):
        v.change(f"{versions[-1].name}/model.py uses servelab's dict API (requests' .inputs, dict responses); on "
                 "Triton use triton_python_backend_utils: pb_utils.get_input_tensor_by_name and InferenceResponse")


def check_model(repo: ModelRepository, name: str) -> ModelVerdict:
    directory = repo.model_dir(name)
    try:
        config, raw = read_config(directory)
    except ServelabError as exc:
        return ModelVerdict(name, "?", Verdict.CHANGE, [f"config.pbtxt does not parse as Triton's ModelConfig: {exc}"])
    versions = _version_dirs(directory)
    try:
        backend = resolve_backend(config, versions[-1] if versions else directory)
    except ServelabError as exc:
        return ModelVerdict(name, "?", Verdict.CHANGE, [str(exc)])
    v = ModelVerdict(name, backend)
    if not versions:
        v.change("no numbered version folder (1/, 2/, ...): Triton loads none")
    if not raw and backend not in _AUTO_COMPLETES:
        v.change(f"no config.pbtxt: Triton cannot auto-complete a {backend} model; write one "
                 "(`curl /v2/models/<m>/config` on servelab shows the completed config)")
    _check_backend(v, config, versions)
    _check_tensors(v, config)
    _check_python(v, versions)
    ours = sorted(SERVELAB_PARAMETERS & set(config.parameters))
    if ours:
        v.note(f"parameters {ours} are servelab's; Triton ignores them")
    return v


def check_repository(roots: list[Path]) -> list[ModelVerdict]:
    """One verdict per model of the repository, in name order."""
    repo = ModelRepository(list(roots))
    verdicts = {name: check_model(repo, name) for name in repo.model_names()}
    for v in verdicts.values():
        if v.backend != "ensemble":
            continue
        config, _ = read_config(repo.model_dir(v.name))
        blocked = sorted({s.model_name for s in config.ensemble_scheduling.step
                          if s.model_name in verdicts and verdicts[s.model_name].verdict is Verdict.CHANGE})
        if blocked:
            v.change(f"its steps {blocked} do not load on Triton as they are (see their rows)")
    return list(verdicts.values())
