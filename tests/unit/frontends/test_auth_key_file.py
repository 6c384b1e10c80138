"""Key files in TorchServe's shape: generated 0600 and exclusively, read back, bad files refused."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path

import pytest

from servelab.config.settings import AuthSettings
from servelab.frontends.auth import AuthSetupError, load_keys


def test_a_missing_key_file_is_generated_0600_and_logged_by_path_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "key_file.json"
    with caplog.at_level(logging.INFO, logger="servelab.auth"):
        keys = load_keys(AuthSettings(key_file=path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = json.loads(path.read_text())
    assert data == {"management": {"key": keys.management}, "inference": {"key": keys.inference}}
    assert keys.management and keys.inference and keys.management != keys.inference
    assert len(keys.management) >= 40
    assert str(path.resolve()) in caplog.text
    assert keys.management not in caplog.text and keys.inference not in caplog.text
    again = load_keys(AuthSettings(key_file=path))  # an existing file is read, never overwritten
    assert again == keys


def test_a_torchserve_key_file_is_read_ignoring_its_extra_fields(tmp_path: Path) -> None:
    path = tmp_path / "key_file.json"
    path.write_text(json.dumps({
        "management": {"key": "B-E5KSRM", "expiration time": "2024-02-16T21:12:24.801167Z"},
        "inference": {"key": "gNRuA7dS", "expiration time": "2024-02-16T21:12:24.801148Z"},
        "API": {"key": "yv9uQajP"},
    }))
    path.chmod(0o600)
    keys = load_keys(AuthSettings(key_file=path))
    assert (keys.management, keys.inference) == ("B-E5KSRM", "gNRuA7dS")


def test_a_key_file_with_only_a_management_key(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "keys.json"
    path.write_text('{"management": {"key": "only-management"}}')
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="servelab.auth"):
        keys = load_keys(AuthSettings(key_file=path))
    assert keys.management == "only-management" and keys.inference is None
    assert "can be read by other users" in caplog.text


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("not json", "cannot read it as JSON"),
        ("[1, 2]", "expected a JSON object"),
        ("{}", "holds neither a 'management' nor an 'inference' key"),
        ('{"management": "flat-string"}', "'management' must be an object whose 'key'"),
        ('{"inference": {"key": "has space"}}', "'inference' must be an object whose 'key'"),
        ('{"management": {"key": ""}}', "'management' must be an object"),
    ],
)
def test_bad_key_files_say_what_was_expected(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "keys.json"
    path.write_text(body)
    with pytest.raises(AuthSetupError, match=message):
        load_keys(AuthSettings(key_file=path))


def test_a_key_file_in_a_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(AuthSetupError, match="cannot create it"):
        load_keys(AuthSettings(key_file=tmp_path / "no" / "such" / "keys.json"))
