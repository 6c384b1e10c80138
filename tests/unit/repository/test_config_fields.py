"""The config-fields table (repository/fields.py): every ModelConfig field is classified, what servelab does
not implement fails the load naming the field, what it ignores is logged with the reason."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from google.protobuf.descriptor import Descriptor

from harness.models import echo_py, write_python_model
from harness.repository import write_config
from servelab.errors import Unsupported
from servelab.protocol import model_config_pb2 as mc
from servelab.repository import ModelRepository
from servelab.repository.fields import FIELDS, Support, check_fields, rule_for, used_fields

BASE = """
name: "m" backend: "python" max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def _paths(descriptor: Descriptor, prefix: str = "") -> list[str]:
    out = []
    for field in descriptor.fields:
        path = prefix + field.name
        message = field.message_type
        if message is not None and message.GetOptions().map_entry:
            message = message.fields_by_name["value"].message_type
        out.append(path)
        if message is not None and message.full_name != descriptor.full_name:
            out.extend(_paths(message, path + "."))
    return out


def test_every_field_of_the_proto_is_classified() -> None:
    unclassified = []
    for path in _paths(mc.ModelConfig.DESCRIPTOR):
        try:
            rule_for(path)
        except KeyError:
            unclassified.append(path)
    assert not unclassified
    assert all(rule.reason for rule in FIELDS.values())
    assert all(key.split(".")[0] in mc.ModelConfig.DESCRIPTOR.fields_by_name for key in FIELDS)


def _load(tmp_path: Path, extra: str) -> None:
    write_config(tmp_path / "m", BASE + extra)
    write_python_model(tmp_path / "m", echo_py())
    ModelRepository(tmp_path).read("m")


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ('instance_group [ { rate_limiter { resources [ { name: "R" count: 1 } ] } } ]', "instance_group.rate_limiter"),
        ('batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT32 source_input: "INPUT" } ]', "batch_input"),
        ("optimization { cuda { graphs: true } }", "optimization.cuda"),
        ('model_operations { op_library_filename: "libcustom.so" }', "model_operations"),
        ('model_repository_agents { agents [ { name: "checksum" } ] }', "model_repository_agents"),
        ("sequence_batching { iterative_sequence: true }", "sequence_batching.iterative_sequence"),
        ("instance_group [ { passive: true } ]", "instance_group.passive"),
        ('runtime: "model.py"', "runtime"),
        ('metric_tags { key: "team" value: "a" }', "metric_tags"),
    ],
)
def test_what_servelab_does_not_implement_fails_the_load(tmp_path: Path, extra: str, field: str) -> None:
    with pytest.raises(Unsupported, match=rf"config field '{field}' is set, but servelab does not implement it"):
        _load(tmp_path, extra)


def test_a_decoupled_python_model_loads(tmp_path: Path) -> None:
    _load(tmp_path, "model_transaction_policy { decoupled: true }")  # the python backend streams its responses


def test_ignored_fields_load_and_are_logged_with_the_reason(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    extra = """
      optimization { priority: PRIORITY_MAX input_pinned_memory { enable: true } graph { level: 1 } }
      cc_model_filenames { key: "7.5" value: "model_75.py" }
      instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]
    """
    with caplog.at_level(logging.INFO, logger="servelab.repository"):
        _load(tmp_path, extra)
    text = caplog.text
    assert "'optimization.priority' is ignored: Triton sets its scheduler threads' nice level" in text
    assert "'optimization.input_pinned_memory' is ignored: CUDA pinned host memory" in text
    assert "'optimization.graph' is ignored: only onnxruntime reads it" in text  # a python model
    assert "'cc_model_filenames' is ignored" in text and "'instance_group.gpus' is ignored" in text


def test_a_message_set_empty_counts_as_used() -> None:
    config = mc.ModelConfig(name="m")
    config.sequence_batching.direct.SetInParent()
    config.version_policy.all.SetInParent()
    assert used_fields(config) == ["name", "version_policy.all", "sequence_batching.direct"]


def test_supported_fields_of_a_real_config_pass() -> None:
    config = mc.ModelConfig(name="m", backend="onnxruntime", max_batch_size=8)
    config.input.add(name="x", data_type=mc.TYPE_FP32, dims=[4], format=mc.ModelInput.FORMAT_NCHW)
    config.dynamic_batching.preferred_batch_size.append(4)
    config.optimization.graph.level = -1
    config.model_warmup.add(name="w", batch_size=1)
    assert check_fields(config, "onnxruntime") == []
    assert rule_for("optimization.graph.level")[1].support is Support.SUPPORTED
