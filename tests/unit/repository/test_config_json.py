"""The config JSON (GET /v2/models/<m>/config) is Triton's: every field without presence printed, 64-bit
integers as numbers, Triton's defaults filled in. The expected document below is what Triton 2.51 returned
for the same config.pbtxt on this machine (tests/integration/peers/test_sequence_peers.py compares live)."""

from __future__ import annotations

import json
from pathlib import Path

from google.protobuf import json_format

from harness.models import echo_py, write_python_model
from harness.repository import write_config
from servelab.protocol import model_config_pb2 as mc
from servelab.repository import ModelRepository, config_from_json, config_to_dict

CONFIG = """
name: "plain"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape: { shape: [ 4 ] } } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 1, 4 ] } } ]
dynamic_batching { max_queue_delay_microseconds: 100 }
model_warmup [ { name: "w1" batch_size: 2 inputs { key: "INPUT" value: { data_type: TYPE_FP32 dims: [ 2, 2 ] zero_data: true } } } ]
"""
TRITON_2_51 = json.loads("""{"name":"plain","platform":"","backend":"python","runtime":"","version_policy":{"latest":{"num_versions":1}},"max_batch_size":8,"input":[{"name":"INPUT","data_type":"TYPE_FP32","format":"FORMAT_NONE","dims":[2,2],"reshape":{"shape":[4]},"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false,"is_non_linear_format_io":false}],"output":[{"name":"OUTPUT","data_type":"TYPE_FP32","dims":[4],"reshape":{"shape":[1,4]},"label_filename":"","is_shape_tensor":false,"is_non_linear_format_io":false}],"batch_input":[],"batch_output":[],"optimization":{"priority":"PRIORITY_DEFAULT","input_pinned_memory":{"enable":true},"output_pinned_memory":{"enable":true},"gather_kernel_buffer_threshold":0,"eager_batching":false},"dynamic_batching":{"preferred_batch_size":[8],"max_queue_delay_microseconds":100,"preserve_ordering":false,"priority_levels":0,"default_priority_level":0,"priority_queue_policy":{}},"instance_group":[{"name":"plain","kind":"KIND_CPU","count":1,"gpus":[],"secondary_devices":[],"profile":[],"passive":false,"host_policy":""}],"default_model_filename":"model.py","cc_model_filenames":{},"metric_tags":{},"parameters":{},"model_warmup":[{"name":"w1","batch_size":2,"inputs":{"INPUT":{"data_type":"TYPE_FP32","dims":[2,2],"zero_data":true}},"count":0}]}""")


def _read(tmp_path: Path, text: str, name: str = "plain") -> mc.ModelConfig:
    write_config(tmp_path / name, text)
    write_python_model(tmp_path / name, echo_py())
    return ModelRepository(tmp_path).read(name).config


def test_a_loaded_config_reads_back_as_tritons_json(tmp_path: Path) -> None:
    got = config_to_dict(_read(tmp_path, CONFIG))
    assert got == TRITON_2_51
    assert list(got) == list(TRITON_2_51)  # and in the .proto's field order, as Triton writes it


def test_64_bit_integers_are_numbers_and_map_keys_stay_strings() -> None:
    config = mc.ModelConfig(name="m", max_batch_size=2)
    config.input.add(name="x", data_type=mc.TYPE_FP32, dims=[-1, 3])
    config.dynamic_batching.max_queue_delay_microseconds = 2**40
    config.dynamic_batching.priority_queue_policy[2].default_timeout_microseconds = 5
    config.version_policy.specific.versions.extend([1, 3])
    out = config_to_dict(config)
    assert out["input"][0]["dims"] == [-1, 3]
    assert out["dynamic_batching"]["max_queue_delay_microseconds"] == 2**40
    assert out["dynamic_batching"]["priority_queue_policy"]["2"]["default_timeout_microseconds"] == 5
    assert out["version_policy"] == {"specific": {"versions": [1, 3]}}
    assert json_format.ParseDict(out, mc.ModelConfig()) == config  # what Triton writes, it reads back


def test_defaults_fill_groups_policy_and_idle_limit_but_keep_what_is_given(tmp_path: Path) -> None:
    text = """
      name: "g" backend: "python" max_batch_size: 4
      input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
      output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
      sequence_batching { }
      optimization { input_pinned_memory { enable: false } }
      instance_group [ { count: 2 }, { name: "named" kind: KIND_CPU } ]
      version_policy { all { } }
    """
    out = config_to_dict(_read(tmp_path, text, "g"))
    assert out["sequence_batching"]["max_sequence_idle_microseconds"] == 1000000
    assert [(g["name"], g["count"], g["kind"]) for g in out["instance_group"]] == [
        ("g_0", 2, "KIND_CPU"), ("named", 1, "KIND_CPU"),
    ]  # fmt: skip
    assert out["optimization"]["input_pinned_memory"] == {"enable": False}
    assert out["optimization"]["output_pinned_memory"] == {"enable": True}
    assert out["version_policy"] == {"all": {}}


def test_a_load_override_in_tritons_json_round_trips(tmp_path: Path) -> None:
    config = _read(tmp_path, CONFIG)
    again = config_from_json(json.dumps(config_to_dict(config)), "plain")
    assert again == config
