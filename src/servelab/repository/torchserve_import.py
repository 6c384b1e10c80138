"""``servelab import torchserve STORE --out REPO``: a TorchServe model store as a Triton-layout repository.

Each model of the store (:mod:`.torchserve_layout`, one servelab version per TorchServe version) becomes
``REPO/<model>/config.pbtxt`` (backend ``torchserve_handler``, the envelope tensors, batching,
instances, TorchServe's versions and archive names in ``parameters``) plus ``REPO/<model>/<version>/``:
the unarchived model folder (``MAR-INF/MANIFEST.json``, serialized file, handler, extra files),
unpacked with the same checks as at serving time, or hard-linked from an unarchived folder.
``servelab serve REPO`` then answers TorchServe's REST and gRPC clients as ``--torchserve-config`` does
(TorchServe's version strings included); Triton has no backend for TorchServe handlers, which the
report (``servelab check-triton``) says per model.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from servelab.errors import InvalidArgument, ServelabError
from servelab.repository.config import CONFIG_FILE, config_to_text
from servelab.repository.torchserve import TorchServeRepository
from servelab.repository.torchserve_archive import unpack
from servelab.repository.torchserve_layout import ModelPlan

__all__ = ["ImportedModel", "import_torchserve"]


@dataclass
class ImportedModel:
    """One model of the import, or the one that could not be imported."""

    name: str
    versions: dict[int, str] = field(default_factory=dict)
    archives: list[str] = field(default_factory=list)
    handler: str = ""
    #: why it was not written ("" = written)
    error: str = ""
    notes: list[str] = field(default_factory=list)


def import_torchserve(store: TorchServeRepository, out: Path) -> list[ImportedModel]:
    """Write the Triton-layout repository ``out`` (absent or empty) from ``store``; one row per model."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InvalidArgument(f"--out {out} exists and is not an empty folder; choose a new one")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, plan in sorted(store.plans().items()):
        if isinstance(plan, ServelabError):
            rows.append(ImportedModel(name, error=plan.message))
            continue
        try:
            rows.append(_write(plan, out / name, store.max_unpacked_bytes))
        except ServelabError as exc:
            shutil.rmtree(out / name, ignore_errors=True)
            rows.append(ImportedModel(name, error=exc.message))
    return rows


def _write(plan: ModelPlan, folder: Path, max_unpacked_bytes: int) -> ImportedModel:
    folder.mkdir()
    (folder / CONFIG_FILE).write_text(config_to_text(plan.config))
    row = ImportedModel(plan.name, notes=list(plan.notes))
    for version, entry in sorted(plan.versions.items()):
        target = folder / str(version)
        if entry.kind == "folder":
            _link_tree(entry.path, target)
        else:
            with tempfile.TemporaryDirectory(dir=folder) as scratch:
                unpacked = unpack(entry, Path(scratch) / "unpacked", max_unpacked_bytes)
                shutil.move(str(unpacked), target)
        row.versions[version] = entry.version
        row.archives.append(entry.file)
        row.handler = str(entry.model.get("handler", ""))
    return row


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(source, target)


def _link_tree(source: Path, target: Path) -> None:
    """``target`` as a copy of the model folder ``source``: hard links where the file system allows."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"), copy_function=_link_or_copy)
