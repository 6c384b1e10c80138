"""`servelab demo`'s first screen: every example model runs on inputs it accepts, and the table fits 120 columns.

The example repository is built here with a small graph (5,000 nodes instead of 100,000: the same models,
seconds instead of a minute), then the demo's model-run step runs on it in-process and as the CLI does.
"""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from servelab.cli.demo import MAX_WIDTH, run_models

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "build_repository.py"
EXAMPLE_MODELS = {"simple", "mlp_onnx", "mlp_torchscript", "mlp_openvino", "preprocess", "pipeline",
                  "graphsage_sampler", "graphsage_layers", "sage", "sage_fused"}  # fmt: skip
CALLS = 5


@pytest.fixture(scope="module")
def example_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = importlib.util.spec_from_file_location("servelab_examples_build_repository", EXAMPLES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build(tmp_path_factory.mktemp("demo") / "repository", graph_nodes=5_000)


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_every_example_model_runs_and_the_table_fits(example_repo: Path) -> None:
    console = Console(width=MAX_WIDTH, record=True, file=io.StringIO())
    rows = run_models(example_repo, calls=CALLS, console=console)
    assert {r.model for r in rows} == EXAMPLE_MODELS
    failing = [(r.model, r.status, r.reason) for r in rows if r.status != "ok"]
    assert not failing, failing
    assert all(r.p50_us is not None and r.p50_us > 0 for r in rows)
    layers = next(r for r in rows if r.model == "graphsage_layers")
    assert "from graphsage_sampler in sage" in layers.inputs  # valid row indices, not random integers
    assert "new_features" not in next(r for r in rows if r.model == "sage").inputs  # optional: left out
    assert _widest(console.export_text()) <= MAX_WIDTH


def test_the_cli_demo_fits_a_120_column_terminal(example_repo: Path) -> None:
    env = {**os.environ, "COLUMNS": "120"}
    done = subprocess.run(
        [sys.executable, "-m", "servelab.cli", "demo", str(example_repo), "--no-compare", "--calls", str(CALLS)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert _widest(done.stdout) <= 120, done.stdout
    for name in EXAMPLE_MODELS:
        assert f"│ {name} " in done.stdout, f"no row for {name}:\n{done.stdout}"
    for word in ("skipped", "not ready", "refused", "Traceback"):
        assert word not in done.stdout + done.stderr


REFUSING_MODEL = '''\
import numpy as np


class TritonPythonModel:
    def initialize(self, args):
        pass

    def execute(self, requests):
        for r in requests:
            if int(r.inputs["IDS"].max()) >= 3:
                raise ValueError("IDS must be below 3: this model has 3 rows")
        return [{"OUT": r.inputs["IDS"].astype(np.float32)} for r in requests]

    def finalize(self):
        pass
'''


def test_a_model_that_refuses_the_inputs_is_skipped_with_the_reason(tmp_path: Path) -> None:
    model = tmp_path / "repo" / "picky"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(REFUSING_MODEL)
    (model / "config.pbtxt").write_text(textwrap.dedent("""\
        name: "picky"
        backend: "python"
        max_batch_size: 0
        input [ { name: "IDS", data_type: TYPE_INT64, dims: [64] } ]
        output [ { name: "OUT", data_type: TYPE_FP32, dims: [64] } ]
        parameters { key: "instance_mode" value { string_value: "thread" } }
        """))  # fmt: skip
    console = Console(width=MAX_WIDTH, record=True, file=io.StringIO())
    (row,) = run_models(tmp_path / "repo", calls=CALLS, console=console)
    assert row.status == "skipped"
    assert "inputs refused" in row.reason and "below 3" in row.reason
    text = console.export_text()
    assert "skipped: inputs refused" in text and _widest(text) <= MAX_WIDTH
