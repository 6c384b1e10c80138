"""servelab.frontends.shared_memory without sockets: the key rule, the regions and tensors in them.

Regions are real POSIX shared-memory objects made with tritonclient's own helper (what a client uses).
"""

from __future__ import annotations

import importlib.util
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.utils.shared_memory as client_shm
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor, serialized_byte_size

from harness.shm import ClientRegions
from servelab.errors import AlreadyExists, InvalidArgument, NotFound, Unsupported
from servelab.frontends.shared_memory import (
    RegionSlice,
    SharedMemory,
    SystemSharedMemory,
    slice_from_parameters,
)
from servelab.trust import SHM_DIR, check_shm_key
from servelab.types import DataType

SIZE = 256


@pytest.fixture
def made() -> Iterator[tuple[Any, str]]:
    """One client-made POSIX shared-memory object of SIZE bytes: (tritonclient's handle, its key)."""
    with ClientRegions("unit") as objects:
        yield objects.create("r", SIZE)


@pytest.fixture
def handle(made: tuple[Any, str]) -> Any:
    return made[0]


@pytest.fixture
def key(made: tuple[Any, str]) -> str:
    return made[1]


@pytest.fixture
def regions() -> Iterator[SystemSharedMemory]:
    registry = SystemSharedMemory()
    yield registry
    registry.close()


@pytest.mark.parametrize("key", ["/abc", "abc", "/servelab-in_0.data", "/" + "x" * 255])
def test_a_posix_shm_name_maps_into_dev_shm(key: str) -> None:
    assert check_shm_key(key) == SHM_DIR / key.removeprefix("/")


@pytest.mark.parametrize("key", ["", "/", "/..", "..", "/a/b", "a/b", "/../etc/passwd", "/x..y", "/a\0b", "/" + "x" * 256])
def test_a_key_naming_anything_else_is_refused_with_the_rule(key: str) -> None:
    with pytest.raises(InvalidArgument, match="names an object in /dev/shm only"):
        check_shm_key(key)


def test_register_status_unregister(regions: SystemSharedMemory, handle: Any, key: str) -> None:
    regions.register("in", key, 0, SIZE)
    regions.register("tail", key, 128, 128)
    assert regions.status() == [
        {"name": "in", "key": key, "offset": 0, "byte_size": SIZE},
        {"name": "tail", "key": key, "offset": 128, "byte_size": 128},
    ]
    assert regions.status("tail") == [{"name": "tail", "key": key, "offset": 128, "byte_size": 128}]
    with pytest.raises(AlreadyExists, match="shared memory region 'in' already in manager"):
        regions.register("in", key, 0, 16)
    regions.unregister("in")
    regions.unregister("never-registered")  # Triton's rule: not an error
    with pytest.raises(NotFound, match="Unable to find system shared memory region: 'in'"):
        regions.status("in")
    regions.unregister()
    assert regions.status() == []


def test_a_region_past_the_object_or_a_missing_object_is_refused(regions: SystemSharedMemory, handle: Any, key: str) -> None:
    with pytest.raises(InvalidArgument, match=f"Invalid shared memory region: '{key}': offset 200 \\+ byte_size 100 runs past its 256 bytes"):
        regions.register("r", key, 200, 100)
    with pytest.raises(NotFound, match="Unable to open shared memory region: '/servelab-unit-missing'.*local to the server"):
        regions.register("r", "/servelab-unit-missing", 0, 16)
    with pytest.raises(InvalidArgument, match="'byte_size' must be at least 1"):
        regions.register("r", key, 0, 0)
    assert regions.status() == []


def test_a_symlink_in_dev_shm_is_not_followed(regions: SystemSharedMemory, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * 64)
    link = SHM_DIR / f"servelab-unit-link-{uuid.uuid4().hex[:8]}"
    link.symlink_to(secret)
    try:
        with pytest.raises(NotFound, match="Unable to open shared memory region"):
            regions.register("r", "/" + link.name, 0, 16)
    finally:
        link.unlink()


def test_inputs_are_read_only_views_and_outputs_land_in_place(regions: SystemSharedMemory, handle: Any, key: str) -> None:
    data = np.arange(16, dtype=np.int32)
    client_shm.set_shared_memory_region(handle, [data])
    regions.register("r", key, 0, SIZE)
    array = regions.read(RegionSlice("r", 64, 0), DataType.INT32, (1, 16), "INPUT0")
    np.testing.assert_array_equal(array, data.reshape(1, 16))
    assert not array.flags.writeable
    regions.write(RegionSlice("r", 64, 128), data * 3, DataType.INT32, "OUTPUT0")
    np.testing.assert_array_equal(client_shm.get_contents_as_numpy(handle, np.int32, [16], offset=128), data * 3)
    with pytest.raises(InvalidArgument, match="needs 64 bytes of data; got 60"):
        regions.read(RegionSlice("r", 60, 0), DataType.INT32, (1, 16), "INPUT0")
    with pytest.raises(InvalidArgument, match=r"output 'OUTPUT0' \(32 bytes\) should be at least 64 bytes"):
        regions.write(RegionSlice("r", 32, 0), data, DataType.INT32, "OUTPUT0")
    with pytest.raises(InvalidArgument, match="Invalid offset \\+ byte size for shared memory region: 'r'"):
        regions.read(RegionSlice("r", 64, 224), DataType.INT32, (1, 16), "INPUT0")
    with pytest.raises(NotFound, match="Unable to find shared memory region: 'other'"):
        regions.read(RegionSlice("other", 64, 0), DataType.INT32, (1, 16), "INPUT0")


def test_bytes_tensors_travel_serialised(regions: SystemSharedMemory, handle: Any, key: str) -> None:
    words = np.array([b"a", b"", "é".encode(), b"x" * 40], dtype=object)
    raw = serialize_byte_tensor(words)
    client_shm.set_shared_memory_region(handle, [raw])
    regions.register("r", key, 0, SIZE)
    got = regions.read(RegionSlice("r", serialized_byte_size(raw), 0), DataType.BYTES, (4,), "IN")
    assert list(got) == list(words)
    regions.write(RegionSlice("r", 128, 128), words[::-1].copy(), DataType.BYTES, "OUT")
    back = client_shm.get_contents_as_numpy(handle, np.object_, [4], offset=128)
    assert list(back) == list(words[::-1])
    assert list(deserialize_bytes_tensor(raw.item())) == list(words)


def test_unregister_while_a_view_is_alive_keeps_the_view_valid(regions: SystemSharedMemory, handle: Any, key: str) -> None:
    client_shm.set_shared_memory_region(handle, [np.full(16, 7, dtype=np.int32)])
    regions.register("r", key, 0, SIZE)
    view = regions.read(RegionSlice("r", 64, 0), DataType.INT32, (16,), "IN")
    regions.unregister("r")  # the request holding ``view`` finishes on a mapping that is still there
    assert int(view.sum()) == 7 * 16
    with pytest.raises(NotFound):
        regions.read(RegionSlice("r", 64, 0), DataType.INT32, (16,), "IN")


def test_the_parameter_keys_come_out_of_the_tensor_parameters() -> None:
    params: dict[str, Any] = {"shared_memory_region": "r", "shared_memory_byte_size": 64, "other": 1}
    assert slice_from_parameters(params, "input 'X'") == RegionSlice("r", 64, 0)
    assert params == {"other": 1}
    assert slice_from_parameters({"other": 1}, "input 'X'") is None
    with pytest.raises(InvalidArgument, match="input 'X': parameter 'shared_memory_region' needs 'shared_memory_byte_size'"):
        slice_from_parameters({"shared_memory_region": "r"}, "input 'X'")
    with pytest.raises(InvalidArgument, match="need 'shared_memory_region'"):
        slice_from_parameters({"shared_memory_offset": 4}, "input 'X'")
    with pytest.raises(InvalidArgument, match="'shared_memory_offset' must be a non-negative integer"):
        slice_from_parameters({"shared_memory_region": "r", "shared_memory_byte_size": 4, "shared_memory_offset": -1}, "x")
    assert os.path.isdir(SHM_DIR)


@pytest.mark.skipif(importlib.util.find_spec("cuda") is not None, reason="cuda-python is installed here")
def test_without_cuda_python_cuda_regions_are_unsupported_and_not_listed() -> None:
    shared = SharedMemory()
    assert shared.extensions() == ("system_shared_memory",)
    assert shared.cuda.status() == []
    shared.cuda.unregister()  # nothing to do: what Triton's examples call first
    with pytest.raises(Unsupported, match="needs a GPU and NVIDIA's cuda-python package"):
        shared.cuda.register("g", b"\0" * 64, 0, 64)
    with pytest.raises(NotFound, match="Unable to find cuda shared memory region: 'g'"):
        shared.cuda.status("g")


def test_a_tensor_region_is_looked_up_among_system_regions_too(handle: Any, key: str) -> None:
    shared = SharedMemory()
    try:
        shared.system.register("r", key, 0, SIZE)
        data = np.arange(4, dtype=np.float32)
        shared.write(RegionSlice("r", 16, 32), data, DataType.FP32, "OUT")
        np.testing.assert_array_equal(shared.read(RegionSlice("r", 16, 32), DataType.FP32, (4,), "IN"), data)
    finally:
        shared.close()
    assert shared.system.status() == []
