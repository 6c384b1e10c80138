"""The worker channel in one process: shared-memory blocks are reused, grown and released, headers
carry only descriptors, and BYTES cross in Triton's length-prefixed layout."""

from __future__ import annotations

from collections.abc import Iterator

import ml_dtypes
import numpy as np
import pytest
from workers_testutil import channel_pair

from servelab.core.workers._channel import EXECUTE, HEADER_MAX, Channel
from servelab.errors import InvalidArgument

MIB = 1 << 20


@pytest.fixture
def pair() -> Iterator[tuple[Channel, Channel]]:
    with channel_pair(MIB) as ends:
        yield ends


def _send(channel: Channel, msg_id: int, arrays: dict[str, np.ndarray]) -> None:
    channel.send(EXECUTE, msg_id, build=lambda put: [put(arrays)], owner=msg_id)


def test_blocks_are_reused_once_their_owner_is_released(pair: tuple[Channel, Channel]) -> None:
    server, worker = pair
    x = {"x": np.arange(1000, dtype=np.float32)}
    _send(server, 1, x)
    first = worker.recv()[2][0][0]
    _send(server, 2, x)  # request 1 still owns its block: request 2 gets another
    second = worker.recv()[2][0][0]
    assert first[4] != second[4]
    server.release(1)
    server.release(2)
    _send(server, 3, x)
    third = worker.recv()[2][0][0]
    assert third[4] == first[4] and third[3] == first[3]  # same segment, same offset


def test_a_tensor_larger_than_the_arena_maps_a_new_segment(pair: tuple[Channel, Channel]) -> None:
    server, worker = pair
    big = {"x": np.random.default_rng(0).standard_normal(3 * MIB // 4).astype(np.float32)}  # 3 MiB
    _send(server, 1, big)
    _, _, body = worker.recv()
    (name, dt, shape, segment, _offset, nbytes), = body[0]
    assert (name, dt, shape, nbytes) == ("x", "FP32", big["x"].shape, big["x"].nbytes) and segment == 1
    np.testing.assert_array_equal(worker.arrays(body[0], copy=True)["x"], big["x"])
    server.release(1)
    _send(server, 2, {"x": np.ones(4, np.float32)})  # the first segment, now empty, is gone
    worker.recv()
    assert list(server.writer._segments) == [1]


def test_headers_hold_descriptors_not_tensor_bytes(pair: tuple[Channel, Channel]) -> None:
    server, worker = pair
    _send(server, 1, {"x": np.zeros(MIB, np.uint8)})  # 1 MiB of data, far above the header limit
    _, msg_id, body = worker.recv()
    assert msg_id == 1 and body[0][0][:3] == ("x", "UINT8", (MIB,))
    assert HEADER_MAX < MIB


def test_bytes_cross_length_prefixed_as_in_triton(pair: tuple[Channel, Channel]) -> None:
    server, worker = pair
    strings = np.array([b"ab", b"", "\u00e9".encode()], dtype=object)
    _send(server, 1, {"s": strings})
    _, _, body = worker.recv()
    (_, dt, shape, segment, offset, nbytes), = body[0]
    raw = bytes(worker.reader.maps[segment][offset : offset + nbytes])
    assert dt == "BYTES" and shape == (3,)
    assert raw == b"\x02\x00\x00\x00ab" + b"\x00\x00\x00\x00" + b"\x02\x00\x00\x00\xc3\xa9"
    assert list(worker.arrays(body[0], copy=True)["s"]) == list(strings)


def test_views_and_copies_of_every_fixed_size_type(pair: tuple[Channel, Channel]) -> None:
    server, worker = pair
    arrays = {
        "bool": np.array([[True, False]]), "u8": np.arange(3, dtype=np.uint8),
        "i64": np.array([-(2**62)], np.int64), "f16": np.array([1.5, -2], np.float16),
        "bf16": np.array([1.0, 3.5], ml_dtypes.bfloat16), "f64": np.array(2.5),  # 0-d
        "t": np.arange(6, dtype=np.float32).reshape(2, 3).T,  # not contiguous
        "empty": np.zeros((0, 4), np.int32),
    }
    _send(server, 1, arrays)
    _, _, body = worker.recv()
    views = worker.arrays(body[0], copy=False)
    for name, a in arrays.items():
        assert views[name].dtype == a.dtype and views[name].shape == a.shape, name
        np.testing.assert_array_equal(views[name], a)
    assert views["u8"].base is not None  # a view into shared memory, not a copy


def test_a_tensor_no_datatype_carries_is_refused_by_name(pair: tuple[Channel, Channel]) -> None:
    server, _ = pair
    with pytest.raises(InvalidArgument, match="tensor 'z' has numpy dtype complex128"):
        _send(server, 1, {"z": np.ones(2, np.complex128)})
