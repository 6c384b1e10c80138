"""``servelab import tfserving models.config --out REPO``: a TF Serving config as a Triton-layout repository.

Each servelab model of the config (one per signature, :mod:`servelab.repository.tfserving_layout`)
becomes ``REPO/<model>/config.pbtxt`` plus ``REPO/<model>/<version>/model.savedmodel/``, the SavedModel
files hard-linked (no extra disk; copied across file systems or with ``copy=True``). Not symlinked:
servelab refuses model files that lead out of their model folder (:mod:`servelab.trust`), and a
symlinked SavedModel would. Version folders lose leading zeros (``00000123`` -> ``123``, Triton
ignores names that start with 0). Labels, the signature map and each SignatureDef stay in the
config's ``parameters``, where servelab's TF Serving front doors read them, so ``servelab serve REPO``
answers TF Serving clients as ``--tfserving-config`` does.

The report says, per model, whether Triton would load it unchanged: checked against Triton's config
rules and its TensorFlow backend's (``TF_SIGNATURE_DEF``), not by running Triton, whose TensorFlow
backend is deprecated since release 25.03 (use releases up to 25.02, or convert to ONNX).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc
from servelab.repository.config import CONFIG_FILE, config_to_text
from servelab.repository.tfserving import scan
from servelab.repository.tfserving_batching import BatchingPlan
from servelab.repository.tfserving_config import read_model_server_config
from servelab.repository.tfserving_layout import PARAM_LABELS, PARAM_MODEL, PARAM_SIGNATURE

__all__ = ["ImportReport", "ImportedModel", "import_tfserving"]

TRITON_TF_NOTE = ("Triton loads tensorflow_savedmodel models with its TensorFlow backend, deprecated since "
                  "Triton 25.03: use a release up to 25.02, or convert the SavedModel to ONNX")
_TRITON_TF_TYPES = {mc.TYPE_BOOL, mc.TYPE_UINT8, mc.TYPE_UINT16, mc.TYPE_UINT32, mc.TYPE_UINT64, mc.TYPE_INT8,
                    mc.TYPE_INT16, mc.TYPE_INT32, mc.TYPE_INT64, mc.TYPE_FP16, mc.TYPE_FP32, mc.TYPE_FP64,
                    mc.TYPE_STRING}


@dataclass
class ImportedModel:
    """One servelab model of the import, or the TF Serving model that could not be imported."""

    name: str
    tf_model: str
    signature: str = ""
    versions: list[int] = field(default_factory=list)
    #: why it was not written ("" = written)
    error: str = ""
    #: whether Triton would load it unchanged, and what a Triton user should know
    triton: bool = False
    triton_notes: list[str] = field(default_factory=list)


@dataclass
class ImportReport:
    models: list[ImportedModel]
    notes: list[str]

    def markdown(self) -> str:
        lines = ["| servelab model | TF Serving model | signature | versions | written | loads on Triton | notes |",
                 "|---|---|---|---|---|---|---|"]
        for m in self.models:
            written = "no: " + m.error if m.error else "yes"
            triton = "yes" if m.triton else "no"
            lines.append(f"| {m.name} | {m.tf_model} | {m.signature} | {', '.join(map(str, m.versions))} | "
                         f"{written} | {triton} | {'; '.join(m.triton_notes)} |")
        return "\n".join([*lines, "", *(f"- {n}" for n in self.notes)]) + "\n"


def import_tfserving(
    config_file: Path, out: Path, *, batching: BatchingPlan | None = None, copy: bool = False
) -> ImportReport:
    """Write the Triton-layout repository ``out`` (which must be absent or empty); returns the report."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InvalidArgument(f"--out {out} exists and is not an empty folder; choose a new one")
    config = read_model_server_config(config_file)
    servables = scan(config, batching)
    out.mkdir(parents=True, exist_ok=True)
    models = []
    for name, servable in sorted(servables.items()):
        if servable.error is not None or servable.config is None:
            models.append(ImportedModel(name, servable.model.name, error=servable.error.message if servable.error else ""))
            continue
        written = mc.ModelConfig()
        written.CopyFrom(servable.config)
        written.ClearField("backend")  # Triton's form: platform tensorflow_savedmodel
        _restrict_policy(written, sorted(servable.versions))
        folder = out / name
        folder.mkdir()
        (folder / CONFIG_FILE).write_text(config_to_text(written))
        for version, source in sorted(servable.versions.items()):
            _link_tree(source, folder / str(version) / "model.savedmodel", copy)
        model = ImportedModel(name, written.parameters[PARAM_MODEL].string_value,
                              written.parameters[PARAM_SIGNATURE].string_value, sorted(servable.versions))
        model.triton, model.triton_notes = triton_check(written)
        models.append(model)
    notes = [TRITON_TF_NOTE, *(batching.notes if batching else ())]
    return ImportReport(models, notes)


def _restrict_policy(config: mc.ModelConfig, versions: list[int]) -> None:
    """A specific policy lists only the versions written (Triton and servelab refuse missing ones)."""
    if config.version_policy.WhichOneof("policy_choice") == "specific":
        del config.version_policy.specific.versions[:]
        config.version_policy.specific.versions.extend(versions)


def triton_check(config: mc.ModelConfig) -> tuple[bool, list[str]]:
    """Whether Triton's config rules accept ``config`` unchanged, and notes for a Triton user."""
    notes: list[str] = []
    ok = True
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for t in tensors:
            if t.data_type not in _TRITON_TF_TYPES:
                ok = False
                notes.append(f"{kind} {t.name!r}: {mc.DataType.Name(t.data_type)} is not a TensorFlow backend type")
            if not t.dims:
                ok = False
                notes.append(f"{kind} {t.name!r}: Triton needs dims")
    labels = config.parameters[PARAM_LABELS].string_value if PARAM_LABELS in config.parameters else "{}"
    if labels != "{}":
        notes.append(f"version labels {labels} have no Triton equivalent: Triton clients name versions by number")
    if config.dynamic_batching.preferred_batch_size:
        notes.append("preferred_batch_size: Triton does not pad batches to these sizes (TF Serving did)")
    return ok, notes


def _link_tree(source: Path, target: Path, copy: bool) -> None:
    """``target`` as a copy of folder ``source``: hard links (same file system) or copies."""
    for path in sorted(source.rglob("*")):
        dest = target / path.relative_to(source)
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not copy:
            try:
                os.link(path, dest)
                continue
            except OSError:
                pass  # another file system, or links not allowed: copy
        shutil.copy2(path, dest)
    target.mkdir(parents=True, exist_ok=True)
