"""What a server needs: only what its models run, and nothing beyond ``pip install servelab``.

Imports: each server runs as ``servelab serve`` on 127.0.0.1 with a ``sitecustomize`` on its PYTHONPATH
that records, per process, every first import of a watched top-level package (an import finder that
looks, writes one line and lets the import go on). onnxruntime must show up in the record of every
server, which proves the recorder ran inside it; torch must not, and neither may what only the bench
extra brings. ``sage_fused`` comes from a tiny graph through ``servelab graph export``.

Install: a fresh virtualenv gets ``pip install .`` (no extras; the package index and pip's cache as
configured), serves the example ONNX models, and its ``servelab bench`` names the extra to install.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from harness.servers import ServerProcess, running_server
from servelab.graph.synth import synth_graph
from servelab.graph.train import TrainConfig, train_to_dir

ROOT = Path(__file__).resolve().parents[2]
NODES, FEATURES, CLASSES = 300, 8, 4
WATCHED = ("torch", "numba", "onnxruntime", "openvino", "tensorflow", "aiohttp", "psutil", "matplotlib")
_RECORDER = f"""
import os, sys

_LOG = os.environ.get("SERVELAB_TEST_IMPORT_LOG")
_WATCHED = {set(WATCHED)!r}


class _FirstImports:
    def find_spec(self, name, path=None, target=None):
        if name in _WATCHED:
            with open(_LOG, "a") as log:
                log.write(f"{{os.getpid()}} {{name}}\\n")
        return None  # let the real finders import it


if _LOG:
    sys.meta_path.insert(0, _FirstImports())
"""


@pytest.fixture(scope="module")
def onnx_repo(test_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``simple`` alone (the ONNX model of the shared test repository)."""
    repo = tmp_path_factory.mktemp("onnx") / "models"
    shutil.copytree(test_repository / "simple", repo / "simple")
    return repo


@pytest.fixture(scope="module")
def sage_repo(onnx_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``simple`` plus what ``servelab graph export`` writes (sampler, layers on ONNX Runtime, ``sage``,
    ``sage_fused``) for a model trained a few steps on a synthetic graph."""
    root = tmp_path_factory.mktemp("sage")
    repo = root / "models"
    shutil.copytree(onnx_repo, repo)
    graph = synth_graph(repo / "_graphs" / "g", nodes=NODES, avg_degree=6, features=FEATURES, classes=CLASSES)
    cfg = TrainConfig(hidden=16, fanouts=(5, 5), batch_size=64, steps=3, eval_nodes=50)
    train_to_dir(graph.path, root / "model", cfg)
    cmd = [sys.executable, "-m", "servelab.cli", "graph", "export", str(root / "model"),
           "--graph", str(graph.path), "--repository", str(repo)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (repo / "sage_fused" / "config.pbtxt").is_file()
    return repo


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The import log that servers started in this test write (their environment carries the recorder)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_RECORDER)
    path = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    log = tmp_path / "imports.log"
    monkeypatch.setenv("SERVELAB_TEST_IMPORT_LOG", str(log))
    return log


def _imports(log: Path, pid: int) -> set[str]:
    lines = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    return {name for who, name in lines if int(who) == pid}


def _infer(server: ServerProcess, model: str, inputs: list[dict[str, object]]) -> dict[str, np.ndarray]:
    response = httpx.post(f"{server.http_url}/v2/models/{model}/infer", json={"inputs": inputs}, timeout=60)
    assert response.status_code == 200, response.text
    return {o["name"]: np.array(o["data"]).reshape(o["shape"]) for o in response.json()["outputs"]}


def _infer_simple(server: ServerProcess) -> None:
    a, b = list(range(16)), [2] * 16
    tensors = [
        {"name": n, "datatype": "INT32", "shape": [1, 16], "data": d}
        for n, d in (("INPUT0", a), ("INPUT1", b))
    ]
    out = _infer(server, "simple", tensors)
    np.testing.assert_array_equal(out["OUTPUT0"], np.add([a], [b]))


@pytest.fixture
def serve(recorded: Path, tmp_path: Path) -> Iterator[Callable[[Path], ServerProcess]]:
    """``serve(repo)``: a server over ``repo`` whose first imports are recorded; stopped (exit 0) after."""
    with contextlib.ExitStack() as stack:
        yield lambda repo: stack.enter_context(running_server(repo, tmp_path, repo.parent.name))


def test_an_onnx_server_imports_neither_torch_nor_numba(
    onnx_repo: Path, serve: Callable[[Path], ServerProcess], recorded: Path
) -> None:
    server = serve(onnx_repo)
    _infer_simple(server)
    assert server.process is not None
    seen = _imports(recorded, server.process.pid)
    assert "onnxruntime" in seen, f"the recorder did not run in the server: {seen}"
    assert seen == {"onnxruntime"}, f"an ONNX-only server imported {sorted(seen - {'onnxruntime'})}"


def test_sage_fused_and_simple_are_served_without_torch(
    sage_repo: Path, serve: Callable[[Path], ServerProcess], recorded: Path
) -> None:
    server = serve(sage_repo)
    _infer_simple(server)
    ids = [0, 5, NODES - 1]
    for model in ("sage_fused", "sage"):
        out = _infer(server, model, [{"name": "node_ids", "datatype": "INT64", "shape": [3], "data": ids}])
        assert out["logits"].shape == (3, CLASSES) and np.isfinite(out["logits"]).all()
    assert server.process is not None
    seen = _imports(recorded, server.process.pid)
    assert {"onnxruntime", "numba"} <= seen, f"the recorder did not see the runtimes the models use: {seen}"
    assert "torch" not in seen, "serving sage_fused / sage imported torch"
    assert seen == {"onnxruntime", "numba"}, f"the server imported {sorted(seen - {'onnxruntime', 'numba'})}"


@pytest.fixture(scope="module")
def core_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interpreter of a fresh venv holding ``pip install .`` (a copy of this checkout, no extras)."""
    root = tmp_path_factory.mktemp("core-install")
    source = root / "source"
    skip = shutil.ignore_patterns("_generated", "__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "src", source / "src", ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of this checkout's venv
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, env=env, timeout=300)
    python = root / "venv" / "bin" / "python"
    cmd = [str(python), "-m", "pip", "install", "-q", str(source)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return python


@pytest.mark.slow
def test_pip_install_without_extras_serves_the_example_onnx_models(
    core_python: Path, test_repository: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = f"import importlib.util as u; print(*[m for m in {WATCHED!r} if u.find_spec(m)])"
    found = subprocess.run([str(core_python), "-c", probe], capture_output=True, text=True, timeout=60)
    assert found.stdout.split() == ["onnxruntime"], (
        f"pip install . brought more than the server: {found.stdout}"
    )
    repo = tmp_path / "models"
    for name in ("simple", "mlp_onnx"):
        shutil.copytree(test_repository / name, repo / name)
    bench = [str(core_python.parent / "servelab"), "bench", "simple", "--url", "http://127.0.0.1:9"]
    with monkeypatch.context() as m:
        # the shared harness starts ``sys.executable -m servelab.cli serve``: here the fresh venv's
        m.setattr(sys, "executable", str(core_python))
        m.delenv("PYTHONPATH", raising=False)
        m.chdir(tmp_path)
        with running_server(repo, tmp_path, "core") as server:
            _infer_simple(server)
            x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)
            tensor = {"name": "INPUT", "datatype": "FP32", "shape": [2, 16], "data": x.ravel().tolist()}
            assert _infer(server, "mlp_onnx", [tensor])["OUTPUT"].shape == (2, 8)
            hint = subprocess.run(bench, capture_output=True, text=True, timeout=120)
    assert hint.returncode == 2, hint.stdout + hint.stderr
    assert "pip install 'servelab[bench]'" in hint.stderr and "Traceback" not in hint.stderr, hint.stderr
