"""tools/check_cycles.py: import loops of any length in src/ and benchmarks/, lazy imports included."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "tools" / "check_cycles.py"


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    (root / "benchmarks").mkdir(exist_ok=True)
    return root


def _check(root: Path) -> tuple[int, str]:
    done = subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


def test_the_project_has_no_import_cycles() -> None:
    code, out = _check(ROOT)
    assert code == 0, out
    assert out.startswith("no import cycles among"), out


def test_a_loop_through_lazy_and_type_checking_imports_is_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "src/pkg/__init__.py": "",
            "src/pkg/a.py": "from pkg.b import run\n",
            "src/pkg/b.py": """\
                def run() -> None:
                    from pkg import c
                """,
            "src/pkg/c.py": """\
                from typing import TYPE_CHECKING
                if TYPE_CHECKING:
                    from . import a
                """,
            "src/pkg/d.py": "import pkg.a\n",  # imports into the loop, is not part of it
        },
    )
    code, out = _check(root)
    assert code == 1
    assert out.splitlines() == [
        "import cycle among 3 modules (pkg.a, pkg.b, pkg.c), e.g. pkg.a -> pkg.b -> pkg.c -> pkg.a"
    ]


def test_a_name_taken_from_the_parent_package_is_a_loop_a_submodule_is_not(tmp_path: Path) -> None:
    files = {
        "src/pkg/__init__.py": "from pkg.x import X\nLIMIT = 3\n",
        "src/pkg/sub.py": "",
        "src/pkg/x.py": "from pkg import sub\nfrom . import sub as again\nX = 1\n",
    }
    assert _check(_tree(tmp_path / "fine", files))[0] == 0
    files["src/pkg/x.py"] += "from pkg import LIMIT\n"
    code, out = _check(_tree(tmp_path / "loop", files))
    assert code == 1 and "(pkg, pkg.x)" in out, out


@pytest.mark.parametrize("lazy", [False, True])
def test_benchmark_scripts_importing_each_other_by_file_name(tmp_path: Path, lazy: bool) -> None:
    back = "def main() -> None:\n    import first\n" if lazy else "import first\n"
    root = _tree(
        tmp_path,
        {
            "src/pkg/__init__.py": "",
            "benchmarks/first.py": "from second import main\n",
            "benchmarks/second.py": back,
        },
    )
    code, out = _check(root)
    assert code == 1 and "(benchmarks.first, benchmarks.second)" in out, out
