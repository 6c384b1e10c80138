"""NumPy's huge-page hint is off in the processes the ``servelab`` command owns, unless the user's
``NUMPY_MADVISE_HUGEPAGE`` decides (servelab.config.numpy_runtime)."""

from __future__ import annotations

import os
import subprocess
import sys

# prints what disable_numpy_hugepages answered, then the hint's setting after it (the switch returns the
# setting it replaces)
PROBE = (
    "from servelab.config.numpy_runtime import disable_numpy_hugepages; "
    "from numpy._core.multiarray import _set_madvise_hugepage as s; "
    "print(disable_numpy_hugepages(), s(True))"
)


def _run(env: dict[str, str]) -> str:
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True).stdout.strip()


def test_the_hint_is_turned_off() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    assert _run(env) == "True False"


def test_the_users_variable_is_left_to_decide() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"} | {"NUMPY_MADVISE_HUGEPAGE": "1"}
    assert _run(env) == "False True"


def test_the_servelab_command_turns_it_off() -> None:
    code = (
        "import sys; from unittest import mock; import servelab.cli as c; "
        "from numpy._core.multiarray import _set_madvise_hugepage as s; "
        "sys.argv = ['servelab', '--help']; "
        "mock.patch.object(c, 'app', lambda: None).start(); c.main(); print(s(True))"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
