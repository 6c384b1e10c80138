"""The README's in-process snippet, run as a plain script (``python script.py``, module level, no
``if __name__ == "__main__"``): every example model loads READY, python models included, and the
script's ``__main__`` runs once (worker processes never re-run it)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = "SNIPPET-MAIN-RAN"


def _snippet() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### In-process, no server", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README: no python block under 'In-process, no server'"
    return match.group(1)


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding examples/repository, built by the example builder (nothing downloaded)."""
    cwd = tmp_path_factory.mktemp("readme")
    out = cwd / "examples" / "repository"
    subprocess.run([sys.executable, str(ROOT / "examples" / "build_repository.py"), "--out", str(out)],
                   check=True, capture_output=True, timeout=600)
    return cwd


def test_the_readme_in_process_snippet_runs_as_a_plain_script(examples: Path) -> None:
    snippet = _snippet()
    assert 'Engine("examples/repository")' in snippet
    script = examples / "snippet.py"
    script.write_text(
        f'print("{MARKER}", flush=True)\n'
        + snippet
        + '\nengine.load_model("simple")  # the snippet unloads it last\n'
        + 'import json\nprint("INDEX " + json.dumps(engine.get_model_repository_index()), flush=True)\n'
    )
    run = subprocess.run([sys.executable, str(script)], cwd=examples, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.count(MARKER) == 1, run.stdout  # no worker re-ran the script
    index = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("INDEX "))[6:])
    models = {row["name"]: row for row in index if not row["name"].startswith("_")}
    assert "preprocess" in models and "pipeline" in models  # the python model and the ensemble using it
    not_ready = {name: row["reason"] for name, row in models.items() if row["state"] != "READY"}
    assert not not_ready, not_ready
    assert "bootstrapping" not in run.stderr
