"""Fuzzing the TF Serving and TorchServe body decoders (shape from nesting, ``{"b64": ...}``), no sockets.

Bodies are generated JSON (nested lists of every kind of value, deep nesting, ragged lists, objects
keyed by input names) and raw bytes; models are described as the data plane's metadata. Only servelab
errors may come out, within a bounded time, with fixed seeds.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.fuzz import FUZZ, decodes_or_refuses
from harness.fuzz import FUZZ_LIMITS as LIMITS
from servelab.errors import ServelabError
from servelab.frontends.rest import tfserving
from servelab.frontends.tfserving.catalog import InputView, SignatureView
from servelab.frontends.torchserve.tensors import decode_body as torchserve_decode
from servelab.protocol import tfserving as tfs
from servelab.types import DataType

leaves = st.one_of(
    st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.booleans(), st.none(), st.text(max_size=4),
    st.sampled_from([{"b64": "AAAA"}, {"b64": "!!"}, {"b64": 1}, {"x": 1}]),
)
values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=4), max_leaves=30)
deep = st.integers(1, 3000).map(lambda n: "[" * n + "1" + "]" * n)


def metas() -> st.SearchStrategy[dict[str, Any]]:
    tensor = st.fixed_dictionaries({
        "name": st.sampled_from(["a", "b"]),
        "datatype": st.sampled_from([d.value for d in DataType]),
        "shape": st.lists(st.sampled_from([-1, 1, 2, 3]), max_size=3),
    })
    return st.fixed_dictionaries({"inputs": st.lists(tensor, min_size=1, max_size=2, unique_by=lambda t: t["name"])})


@st.composite
def bodies(draw: st.DrawFn, meta: dict[str, Any]) -> bytes:
    names = [m["name"] for m in meta["inputs"]]
    by_name = st.fixed_dictionaries({n: values for n in names})
    choice = draw(st.sampled_from(["instances", "inputs", "named", "value", "deep", "bytes"]))
    if choice == "deep":
        return draw(deep).encode()
    if choice == "bytes":
        return draw(st.binary(max_size=64))
    if choice == "named":
        return json.dumps(draw(by_name)).encode()
    if choice == "value":
        return json.dumps(draw(values)).encode()
    body: dict[str, Any] = {choice: draw(st.one_of(values, by_name, st.lists(by_name, max_size=3)))}
    if draw(st.booleans()):
        body["signature_name"] = draw(st.sampled_from(["serving_default", "", "x", 1]))
    return json.dumps(body).encode()


def _signature(meta: dict[str, Any]) -> SignatureView:
    """The TF Serving view of a model described by its metadata (one signature, not batched)."""
    inputs = {t["name"]: InputView(DataType(t["datatype"]), tuple(t["shape"]), False) for t in meta["inputs"]}
    return SignatureView("serving_default", "m", tfs.meta_graph_pb2.SignatureDef(), inputs, False)


@FUZZ
@given(data=st.data())
def test_tfserving_predict_bodies_decode_or_refuse(data: st.DataObject) -> None:
    meta = data.draw(metas())
    decodes_or_refuses(tfserving._decode_predict, data.draw(bodies(meta)), _signature(meta), LIMITS)


@FUZZ
@given(data=st.data(), content_type=st.sampled_from(["application/json", "", "application/octet-stream"]))
def test_torchserve_prediction_bodies_decode_or_refuse(data: st.DataObject, content_type: str) -> None:
    meta = data.draw(metas())
    decodes_or_refuses(torchserve_decode, data.draw(bodies(meta)), content_type, meta, "m", LIMITS)


@pytest.mark.parametrize("depth", [40, 900, 3000])
def test_deep_nesting_is_invalid_argument_not_recursion(depth: int) -> None:
    body = ("[" * depth + '{"b64": "AAAA"}' + "]" * depth).encode()
    meta = {"inputs": [{"name": "a", "datatype": "BYTES", "shape": [-1]}]}
    with pytest.raises(ServelabError):
        torchserve_decode(body, "application/json", meta, "m", LIMITS)
    with pytest.raises(ServelabError):
        tfserving._decode_predict(b'{"inputs": ' + body + b"}", _signature(meta), LIMITS)
