"""Fuzzing config.pbtxt parsing (and the JSON config of a load request), no sockets.

Text is generated from the ModelConfig vocabulary (field names, enum values, braces, lists, strings
with escapes) so that most examples get past the first token, plus raw bytes; the parsed config then
goes through the request signature the registry builds from it. Only servelab errors may come out,
within a bounded time, with fixed seeds.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from harness.fuzz import SLOW_S, fuzz_settings
from servelab.core.validation import Signature
from servelab.errors import ServelabError
from servelab.protocol import model_config_pb2 as mc
from servelab.repository.config import config_from_json, parse_config_text, read_config

FUZZ = fuzz_settings(max_examples=500)

WORDS = [
    "name", "platform", "backend", "max_batch_size", "input", "output", "data_type", "dims", "reshape", "shape",
    "format", "optional", "label_filename", "instance_group", "kind", "count", "dynamic_batching",
    "preferred_batch_size", "max_queue_delay_microseconds", "sequence_batching", "ensemble_scheduling", "step",
    "model_name", "model_version", "input_map", "output_map", "key", "value", "parameters", "string_value",
    "version_policy", "latest", "num_versions", "specific", "versions", "all", "optimization",
    "execution_accelerators", "cpu_execution_accelerator", "default_model_filename", "response_cache", "enable",
    "TYPE_FP32", "TYPE_INT8", "TYPE_STRING", "TYPE_BF16", "TYPE_INVALID", "KIND_CPU", "KIND_GPU", "FORMAT_NCHW",
    "true", "false", "nope", "[inference.x]", "inf", "-inf", "nan",
]
tokens = st.one_of(
    st.sampled_from(WORDS),
    st.sampled_from(["{", "}", "[", "]", ":", ",", ";", "<", ">", "#"]),
    st.integers(-(2**70), 2**70).map(str),
    st.floats().map(repr),
    st.text(max_size=6).map(json.dumps),
    st.sampled_from(['"\\x"', '"\\777"', '"\\u12"', "'single'", '"unterminated']),
)
texts = st.lists(tokens, max_size=60).map(" ".join)


def _parses_or_refuses(text: str) -> None:
    started = time.perf_counter()
    try:
        config = parse_config_text(text, "config.pbtxt")
    except ServelabError:
        return
    _signature_or_refusal(config)
    assert time.perf_counter() - started < SLOW_S


def _signature_or_refusal(config: mc.ModelConfig) -> None:
    # the registry turns a ValueError here into the model's load failure (InvalidArgument)
    with contextlib.suppress(ServelabError, ValueError):
        Signature(config)


@FUZZ
@given(text=texts)
def test_token_soup_parses_or_refuses(text: str) -> None:
    _parses_or_refuses(text)


@FUZZ
@given(
    name=st.text(max_size=4),
    batch=st.integers(-(2**31), 2**31 - 1),
    dims=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5),
    dtype=st.sampled_from(mc.DataType.keys()),
    extra=texts,
)
def test_near_valid_configs_parse_or_refuse(name: str, batch: int, dims: list[int], dtype: str, extra: str) -> None:
    text = (
        f"name: {json.dumps(name)} max_batch_size: {batch} "
        f"input [ {{ name: \"IN\" data_type: {dtype} dims: {dims} }} ] "
        f"output [ {{ name: \"OUT\" data_type: {dtype} dims: {dims} }} ] {extra}"
    )
    _parses_or_refuses(text)


@FUZZ
@given(raw=st.binary(max_size=200))
def test_arbitrary_bytes_in_a_config_file_parse_or_refuse(raw: bytes, tmp_path_factory: object) -> None:
    folder = Path(tmp_path_factory.mktemp("m"))  # type: ignore[attr-defined]
    (folder / "config.pbtxt").write_bytes(raw)
    with contextlib.suppress(ServelabError):
        read_config(folder)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=4)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(WORDS[:40]), inner, max_size=4),
    ),
    max_leaves=30,
)


@FUZZ
@given(value=json_values, junk=st.sampled_from(["", "x", "[" * 5000, "{" * 3000]))
def test_json_configs_parse_or_refuse(value: object, junk: str) -> None:
    try:
        config = config_from_json(json.dumps(value) + junk, "m")
    except ServelabError:
        return
    _signature_or_refusal(config)
