"""Request building from metadata and input files, and the wire encodings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
import pytest

from servelab.bench import _encode
from servelab.bench.inputs import TensorMeta, build_requests, parse_shape_option
from servelab.bench.loadgen import WorkerPlan
from servelab.bench.specs import InputSpec, LoadSpec
from servelab.bench.workers import split_plan
from servelab.errors import InvalidArgument

IMG = TensorMeta("image", "FP32", (-1, 3, -1))
IDS = TensorMeta("ids", "INT64", (-1, 5))


def test_synthetic_requests_resolve_variable_dims_and_batch() -> None:
    spec = InputSpec(shapes={"image": (3, 7)}, batch_size=4, distinct_requests=3)
    reqs = build_requests([IMG, IDS], spec)
    assert len(reqs) == 3
    assert reqs[0]["image"].shape == (4, 3, 7) and reqs[0]["image"].dtype == np.float32
    assert reqs[0]["ids"].shape == (4, 5) and reqs[0]["ids"].dtype == np.int64
    zeros = build_requests([IDS], InputSpec(fill="zero"))
    assert not zeros[0]["ids"].any()


def test_missing_and_mismatched_shapes_say_what_is_expected() -> None:
    with pytest.raises(InvalidArgument, match=r"--shape image:3,N"):
        build_requests([IMG], InputSpec())
    with pytest.raises(InvalidArgument, match=r"does not fit"):
        build_requests([IMG], InputSpec(shapes={"image": (4, 7)}))
    with pytest.raises(InvalidArgument, match=r"NAME:d1,d2"):
        parse_shape_option(["image=3,7"])
    assert parse_shape_option(["a:b:1,2"]) == {"a:b": (1, 2)}


def test_non_batchable_model_refuses_batch_size() -> None:
    fixed = TensorMeta("x", "FP32", (2, 2))
    assert build_requests([fixed], InputSpec())[0]["x"].shape == (2, 2)
    with pytest.raises(InvalidArgument, match="--batch-size must be 1"):
        build_requests([fixed], InputSpec(batch_size=2))


def test_npz_npy_json_and_folder_inputs(tmp_path: Path) -> None:
    ids = np.arange(30, dtype=np.int64).reshape(6, 5)
    np.savez(tmp_path / "d.npz", ids=ids)
    reqs = build_requests([IDS], InputSpec(data_path=str(tmp_path / "d.npz"), batch_size=2))
    assert len(reqs) == 3 and np.array_equal(reqs[1]["ids"], ids[2:4])
    np.save(tmp_path / "d.npy", ids)
    assert np.array_equal(
        build_requests([IDS], InputSpec(data_path=str(tmp_path / "d.npy")))[5]["ids"][0], ids[5]
    )

    doc = {"data": [{"ids": list(range(5))}, {"ids": {"content": [9] * 5, "shape": [5]}}]}
    (tmp_path / "pa.json").write_text(json.dumps(doc))
    reqs = build_requests([IDS], InputSpec(data_path=str(tmp_path / "pa.json")))
    assert reqs[1]["ids"].tolist() == [[9] * 5] and reqs[0]["ids"].dtype == np.int64

    folder = tmp_path / "samples"
    folder.mkdir()
    for i in range(3):
        np.save(folder / f"{i}.npy", np.full(5, i, dtype=np.int64))
    reqs = build_requests([IDS], InputSpec(data_path=str(folder)))
    assert [r["ids"][0, 0] for r in reqs] == [0, 1, 2]


def test_bad_input_files_are_clear(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="does not exist"):
        build_requests([IDS], InputSpec(data_path=str(tmp_path / "nope.npz")))
    (tmp_path / "bad.json").write_text('{"rows": []}')
    with pytest.raises(InvalidArgument, match="perf_analyzer input JSON"):
        build_requests([IDS], InputSpec(data_path=str(tmp_path / "bad.json")))
    (tmp_path / "short.json").write_text('{"data": [{"ids": [1, 2]}]}')
    with pytest.raises(InvalidArgument, match="do not fill shape"):
        build_requests([IDS], InputSpec(data_path=str(tmp_path / "short.json")))
    np.savez(tmp_path / "other.npz", tokens=np.zeros((2, 5)))
    with pytest.raises(InvalidArgument, match=r"lacks inputs \['ids'\]"):
        build_requests([IDS], InputSpec(data_path=str(tmp_path / "other.npz")))


def test_binary_body_layout() -> None:
    req = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.array([b"hi", b"abc"], dtype=object)}
    body, n = _encode.oip_binary_body(req)
    header = orjson.loads(body[:n])
    assert header["inputs"][0] == {
        "name": "a",
        "shape": [2, 3],
        "datatype": "FP32",
        "parameters": {"binary_data_size": 24},
    }
    assert (
        header["inputs"][1]["datatype"] == "BYTES"
        and header["inputs"][1]["parameters"]["binary_data_size"] == 13
    )
    assert np.array_equal(np.frombuffer(body[n : n + 24], dtype=np.float32), np.arange(6, dtype=np.float32))
    assert body[n + 24 :] == b"\x02\x00\x00\x00hi\x03\x00\x00\x00abc"
    assert orjson.loads(_encode.oip_json_body(req))["inputs"][1]["data"] == ["hi", "abc"]


def test_split_plan_divides_exactly() -> None:
    plan = WorkerPlan(mode="concurrency", level=5, request_count=101, warmup_requests=7, max_inflight=512)
    parts = split_plan(plan, 2)
    assert [p.level for p in parts] == [3, 2]
    assert sum(p.request_count or 0 for p in parts) == 101 and sum(p.warmup_requests for p in parts) == 7
    assert len(split_plan(plan, 8)) == 5  # never more workers than in-flight slots
    rate = split_plan(WorkerPlan(mode="request_rate", level=300.0), 3)
    assert sum(p.level for p in rate) == pytest.approx(300.0)


def test_load_spec_validation_names_the_field() -> None:
    with pytest.raises(InvalidArgument, match="max_windows"):
        LoadSpec(max_windows=2)
    with pytest.raises(InvalidArgument, match="whole numbers"):
        LoadSpec(levels=(1.5,))
    with pytest.raises(InvalidArgument, match="arrivals"):
        LoadSpec(arrivals="bursty")  # type: ignore[arg-type]
