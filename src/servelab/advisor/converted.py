"""What ``servelab convert`` left for the advisor: its manifest read back (``<repo>/<name>.convert.json``).

Only artefacts that passed their parity gate become candidates; their accuracy drop rides along for
``--max-accuracy-drop``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab.advisor.grid import ArtefactRef
from servelab.convert.source_types import TensorInfo
from servelab.errors import InvalidArgument
from servelab.types import DataType

__all__ = ["Converted", "read_converted"]


@dataclass
class Converted:
    name: str
    repository: Path
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    artefacts: list[ArtefactRef]
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def batched(self) -> bool:
        """False for a model that does not batch (``max_batch_size`` 0): it takes whole requests."""
        return any(a.max_batch_size > 0 for a in self.artefacts)

    @property
    def request_file(self) -> Path:
        """The request convert checked a model that does not batch on (one array per input)."""
        return self.repository / f"{self.name}.request.npz"

    def folder(self, artefact: ArtefactRef) -> Path:
        return self.repository / artefact.model

    def fp32_file(self, backend: str, filename: str) -> Path | None:
        """The fp32 model file of ``backend`` (peers are served the unquantised model)."""
        for a in self.artefacts:
            path = self.folder(a) / "1" / filename
            if a.backend == backend and a.precision == "fp32" and path.is_file():
                return path.resolve()
        return None


def _tensors(entries: list[dict[str, Any]]) -> list[TensorInfo]:
    return [TensorInfo(e["name"], DataType.parse(e["datatype"]), tuple(e["shape"])) for e in entries]


def read_converted(repository: Path, name: str | None = None) -> Converted:
    """The manifest ``<repository>/<name>.convert.json`` (the only one when ``name`` is None)."""
    manifests = sorted(repository.glob("*.convert.json"))
    if name is not None:
        manifests = [m for m in manifests if m.name == f"{name}.convert.json"]
    if len(manifests) != 1:
        raise InvalidArgument(
            f"{repository}: expected one convert manifest{f' for {name!r}' if name else ''} (*.convert.json), "
            f"found {[m.name for m in manifests]}; give --name"
        )
    doc = json.loads(manifests[0].read_text())
    artefacts = []
    for a in doc["artefacts"]:
        if a["status"] != "accepted":
            continue
        config = (repository / a["model"] / "config.pbtxt").read_text()
        batch = next((int(line.split(":")[1]) for line in config.splitlines() if line.startswith("max_batch_size:")), 0)
        drop = float((a.get("parity") or {}).get("accuracy_drop", 0.0))
        artefacts.append(ArtefactRef(a["model"], a["backend"], a["precision"], batch, drop, a.get("target", "")))
    return Converted(doc["name"], repository.resolve(), _tensors(doc["inputs"]), _tensors(doc["outputs"]), artefacts, doc)
