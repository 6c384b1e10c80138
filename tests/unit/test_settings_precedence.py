"""Where a server setting comes from: flags > SERVELAB_* environment > --settings FILE > defaults."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from servelab.cli.serve import build_settings
from servelab.config.settings import ServerSettings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("SERVELAB_")]:
        monkeypatch.delenv(name)


@pytest.fixture
def settings_file(tmp_path: Path) -> Path:
    path = tmp_path / "settings.json"
    data = {
        "http_port": 9100,
        "grpc_port": 9101,
        "limits": {"max_body_bytes": 1000, "request_timeout_s": 5.0},
    }
    path.write_text(json.dumps(data))
    return path


def test_the_environment_overrides_the_file_field_by_field(
    settings_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVELAB_HTTP_PORT", "9200")
    monkeypatch.setenv("SERVELAB_LIMITS__MAX_BODY_BYTES", "2000")
    s = ServerSettings.from_file(settings_file)
    assert (s.http_port, s.grpc_port, s.metrics_port) == (9200, 9101, 8002)  # env, file, default
    assert (s.limits.max_body_bytes, s.limits.request_timeout_s) == (2000, 5.0)  # env, file


def test_flags_override_the_environment_and_the_file(
    settings_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVELAB_HTTP_PORT", "9200")
    monkeypatch.setenv("SERVELAB_LIMITS__MAX_BODY_BYTES", "2000")
    s = build_settings(
        [],
        settings_file,
        http_port=9300,
        grpc_port=None,
        limits={"request_timeout_s": 7.0, "max_body_bytes": None},
    )
    assert (s.http_port, s.grpc_port) == (9300, 9101)  # flag, file (a None flag is "not given")
    assert (s.limits.max_body_bytes, s.limits.request_timeout_s) == (2000, 7.0)  # env, flag


def test_without_a_file_the_environment_and_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVELAB_GRPC_PORT", "9401")
    s = ServerSettings.from_file(None, http_port=9400)
    assert (s.http_port, s.grpc_port, s.metrics_port) == (9400, 9401, 8002)


def test_a_file_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text("[8000]")
    with pytest.raises(ValueError, match="expected a JSON object of settings, got list"):
        ServerSettings.from_file(path)
