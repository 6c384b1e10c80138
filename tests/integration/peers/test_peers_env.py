"""Peer environments: the torch pin is enforced, and a venv with a matching stamp is reused untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.bench.peers._venv import TORCH_PIN, PeerEnv
from servelab.errors import InvalidArgument


def test_torch_must_be_pinned(tmp_path: Path) -> None:
    for req in ("torch", "torch>=2", "torch==2.12.0"):
        with pytest.raises(InvalidArgument, match="torch must be pinned"):
            PeerEnv(tmp_path, "p", [req])
    assert PeerEnv(tmp_path, "p", [TORCH_PIN, "torchvision-free-name"]).requirements[0] == TORCH_PIN


def test_stamp_decides_reuse(tmp_path: Path) -> None:
    env = PeerEnv(tmp_path, "p", ["numpy"])
    assert env.root == tmp_path.resolve() / "p" / "venv" and not env.is_ready()
    env.python.parent.mkdir(parents=True)
    env.python.touch()
    (env.root / ".servelab-installed").write_text(env._digest() + "\n")
    assert env.is_ready()
    env.ensure()  # nothing to do: no subprocess is started, nothing raises
    assert not PeerEnv(tmp_path, "p", ["numpy", "orjson"]).is_ready()
