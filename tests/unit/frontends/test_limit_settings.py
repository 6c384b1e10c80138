"""The limit flags of `servelab serve` reach LimitSettings; the connection cap fits the open-file limit."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import ValidationError

from servelab.cli.serve import build_settings
from servelab.config.settings import LimitSettings
from servelab.frontends import http_protocol
from servelab.frontends.http_protocol import FD_RESERVE, bounded_protocol, connection_cap

FLAGS = {
    "max_tensor_elements": 1000, "max_tensor_rank": 5, "offload_decode_bytes": 12345,
    "http_header_timeout_s": 2.5, "http_keep_alive_timeout_s": 7, "http_max_connections": 9,
    "http_max_header_bytes": 2048, "grpc_max_concurrent_streams": 11, "grpc_max_error_bytes": 512,
}


def test_every_limit_flag_lands_in_the_settings(tmp_path: Path) -> None:
    settings = build_settings([tmp_path], None, limits=FLAGS)
    for key, value in FLAGS.items():
        assert getattr(settings.limits, key) == value, key
    assert build_settings([tmp_path], None, limits={}).limits == LimitSettings()


@pytest.mark.parametrize(("field", "value"), [("max_tensor_rank", 65), ("grpc_max_error_bytes", 9000),
                                              ("http_max_connections", 0), ("http_header_timeout_s", 0)])
def test_limits_out_of_range_are_refused_at_start(field: str, value: float) -> None:
    with pytest.raises(ValidationError, match=field):
        LimitSettings(**{field: value})


def test_the_connection_cap_fits_the_open_file_limit() -> None:
    assert connection_cap(1000, 3, 20_000) == 1000
    lowered = connection_cap(1000, 3, 1024)
    assert lowered == (1024 - FD_RESERVE) // 6
    assert 3 * 2 * lowered + FD_RESERVE <= 1024  # three ports at the hard ceiling (twice the cap) still fit


def test_a_lowered_cap_is_logged_once(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    http_protocol._bounded.cache_clear()
    monkeypatch.setattr(http_protocol, "raise_open_file_limit", lambda: 1024)
    limits = LimitSettings(http_max_connections=5000)
    with caplog.at_level(logging.WARNING, logger="servelab.server"):
        first = bounded_protocol(limits, 3)
        second = bounded_protocol(limits, 3)
    http_protocol._bounded.cache_clear()
    assert first == second and first[1] == (1024 - FD_RESERVE) // 6
    assert first[0].hard_connection_cap == 2 * first[1]
    assert sum("lowered" in r.getMessage() for r in caplog.records) == 1
