"""servelab.config.grpc_runtime: grpc experiment switches set before grpc is imported, never over the user's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_PROBE = """
import json, os, sys
from servelab.config.grpc_runtime import CLIENT_EXPERIMENTS, SERVER_EXPERIMENTS, disable_grpc_experiments
first = disable_grpc_experiments(CLIENT_EXPERIMENTS)
second = disable_grpc_experiments(SERVER_EXPERIMENTS)
import grpc
late = disable_grpc_experiments(SERVER_EXPERIMENTS)
print(json.dumps([first, second, late, os.environ.get("GRPC_EXPERIMENTS")]))
"""


def _probe(value: str | None) -> list[object]:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    if value is not None:
        env["GRPC_EXPERIMENTS"] = value
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("inherited", "want"),
    [
        (None, [True, True, False, "-event_engine_client,-event_engine_listener"]),
        ("-event_engine_client", [True, True, False, "-event_engine_client,-event_engine_listener"]),
        ("", [False, False, False, ""]),
        ("event_engine_listener", [False, False, False, "event_engine_listener"]),
        ("-event_engine_client,-other", [False, False, False, "-event_engine_client,-other"]),
    ],
)
def test_switches_merge_ours_and_leave_the_users(inherited: str | None, want: list[object]) -> None:
    assert _probe(inherited) == want


_MAIN = """
import json, os, sys
import servelab.bench, servelab.bench.net, servelab.cli
imported = [os.environ.get("GRPC_EXPERIMENTS"), "grpc" in sys.modules]
sys.argv = ["servelab", "--help"]
try:
    servelab.cli.main()
except SystemExit:
    pass
print(json.dumps(imported + [os.environ.get("GRPC_EXPERIMENTS")]))
"""


def test_importing_changes_nothing_and_the_cli_main_sets_them() -> None:
    """``import servelab.bench`` / ``servelab.cli`` leave the process alone (and load no grpc, so that
    the program that owns the process can still choose); the ``servelab`` command's main sets them."""
    env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    out = subprocess.run([sys.executable, "-c", _MAIN], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [
        None, False, "-event_engine_client,-event_engine_listener"
    ]
