"""Auto-complete and Triton's --strict-model-config / --disable-auto-complete-config: with auto-complete off
nothing is read from the model file (defaults are still filled); a sequence model's control and state
tensors are never auto-completed into its inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from harness.repository import onnx_echo, sequence_models, write_config
from servelab.cli.serve import _auto_complete, build_settings
from servelab.errors import InvalidArgument
from servelab.repository import ModelRepository


def test_auto_complete_off_reads_nothing_from_the_model(tmp_path: Path) -> None:
    d = onnx_echo(tmp_path, "e", "FP32", [4])
    (d / "config.pbtxt").unlink()
    assert ModelRepository(tmp_path).read("e").config.max_batch_size == 4  # auto-complete on: from the file
    with pytest.raises(InvalidArgument, match=r"no inputs in config.pbtxt and auto-complete is off \(--disable-auto"):
        ModelRepository(tmp_path, auto_complete=False).read("e")


def test_auto_complete_off_serves_a_complete_config_as_written(tmp_path: Path) -> None:
    onnx_echo(tmp_path, "e", "FP32", [4])
    config = ModelRepository(tmp_path, auto_complete=False).read("e").config
    assert config.max_batch_size == 8 and [t.name for t in config.input] == ["INPUT"]
    assert config.instance_group[0].count == 1 and config.version_policy.latest.num_versions == 1  # still filled


@pytest.mark.parametrize(
    ("strict", "disable", "expected"),
    [(None, False, None), ("true", False, False), ("false", False, True), (None, True, False), ("1", False, False)],
)
def test_tritons_two_flags(strict: str | None, disable: bool, expected: bool | None) -> None:
    assert _auto_complete(strict, disable) is expected
    settings = build_settings([], None, auto_complete_config=expected)
    assert settings.auto_complete_config is (True if expected is None else expected)


def test_a_bad_strict_value_is_refused() -> None:
    with pytest.raises(typer.BadParameter, match="--strict-model-config takes true or false"):
        _auto_complete("maybe", False)


def test_sequence_controls_and_state_are_not_completed_into_inputs(tmp_path: Path) -> None:
    sequence_models(tmp_path, "simple_string_dyna_sequence")
    d = tmp_path / "simple_string_dyna_sequence"
    text = (d / "config.pbtxt").read_text()
    start, end = text.index("\ninput ["), text.index("instance_group")
    write_config(d, text[: start + 1] + text[end:])  # no input, no output: auto-complete fills them
    config = ModelRepository(tmp_path).read("simple_string_dyna_sequence").config
    assert [t.name for t in config.input] == ["INPUT"]  # START, END, READY, CORRID, INPUT_STATE: the batcher's
    assert [t.name for t in config.output] == ["OUTPUT"]  # OUTPUT_STATE goes back to the batcher
    assert config.max_batch_size == 8 and list(config.input[0].dims) == [1]
