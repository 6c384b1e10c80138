"""Graph stores open only what lies inside them: a manifest that names files elsewhere is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from servelab.errors import InvalidArgument
from servelab.graph.store import GraphStore, build_store


@pytest.fixture
def store(tmp_path: Path) -> Path:
    out = tmp_path / "repo" / "_graphs" / "g"
    build_store(out, [0, 1], [1, 2], num_nodes=3, features=np.ones((3, 2), np.float32), progress=False)
    np.save(tmp_path / "stolen.npy", np.arange(6, dtype=np.float32).reshape(3, 2))
    return out


@pytest.mark.parametrize("entry", ["../../../stolen.npy", "{tmp}/stolen.npy", "link.npy"])
def test_manifest_entries_leading_out_of_the_store_are_refused(store: Path, entry: str) -> None:
    outside = store.parents[2] / "stolen.npy"
    (store / "link.npy").symlink_to(outside)
    manifest = json.loads((store / "manifest.json").read_text())
    manifest["files"]["features"] = entry.replace("{tmp}", str(store.parents[2]))
    (store / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InvalidArgument, match="graph store manifest 'files' entry .* the graph store folder"):
        GraphStore.open(store)


def test_an_untouched_store_opens(store: Path) -> None:
    assert GraphStore.open(store).num_nodes == 3
