"""Triton's system shared-memory extension: regions a client registers, tensors read from and written to them.

A client creates a POSIX shared-memory object (``shm_open``, e.g. ``tritonclient.utils.shared_memory``),
registers it under a region name with key, offset and byte size, and then names ``(region, byte size,
offset)`` in an input's or a requested output's parameters (``shared_memory_region``,
``shared_memory_byte_size``, ``shared_memory_offset``) instead of sending the bytes. Inputs are read as
read-only views of the mapping (no copy); outputs are written into the region and the response carries
only their metadata.

Regions are **local**: the object lives in this machine's ``/dev/shm``, so only a client on the server's
own host can use them; from another machine there is nothing to register. The keys come from clients and
pass :func:`servelab.trust.check_shm_key` (one name in /dev/shm, no ``/`` or ``..``), and the file is
opened with ``O_NOFOLLOW`` and must be a regular file, so a client cannot have the server map any other
file. Messages keep Triton's wording where tools match on it (``Unable to find shared memory region``).

:class:`SharedMemory` (system regions plus the CUDA ones of :mod:`servelab.frontends.cuda_shared_memory`)
belongs to one server and is shared by its REST and gRPC front-ends: a region registered over HTTP can be
used over gRPC, and a tensor's region name is looked up in both, as in Triton. It lives in the front-end
layer because shared memory is a way of carrying tensor bytes, like the binary extension: the data plane
only ever sees numpy arrays.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from servelab.errors import AlreadyExists, InvalidArgument, NotFound
from servelab.frontends.cuda_shared_memory import CUDA_EXTENSION, CudaSharedMemory
from servelab.protocol.codecs import array_from_raw, array_to_raw
from servelab.trust import check_shm_key
from servelab.types import DataType

__all__ = ["EXTENSION", "PARAMETER_KEYS", "RegionSlice", "SharedMemory", "SystemSharedMemory", "slice_from_parameters"]

EXTENSION = "system_shared_memory"
REGION, BYTE_SIZE, OFFSET = "shared_memory_region", "shared_memory_byte_size", "shared_memory_offset"
PARAMETER_KEYS = (REGION, BYTE_SIZE, OFFSET)
@dataclass(frozen=True, slots=True)
class RegionSlice:
    """Where one tensor lies: ``byte_size`` bytes at ``offset`` of a registered region."""

    region: str
    byte_size: int
    offset: int = 0


def _integer(params: dict[str, Any], key: str, where: str, default: int | None) -> int:
    value = params.pop(key, default)
    if value is None:
        raise InvalidArgument(f"{where}: parameter '{REGION}' needs '{key}' too (the tensor's size in bytes)")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(f"{where}: parameter '{key}' must be a non-negative integer; got {value!r}")
    return value


def slice_from_parameters(params: dict[str, Any], where: str) -> RegionSlice | None:
    """Take the shared-memory keys out of ``params`` (a tensor's parameters, changed in place).

    None when the tensor does not use shared memory; InvalidArgument when the keys are incomplete or
    not of the expected types.
    """
    if REGION not in params:
        stray = [k for k in (BYTE_SIZE, OFFSET) if k in params]
        if stray:
            raise InvalidArgument(f"{where}: parameters {stray} need '{REGION}' (the registered region's name)")
        return None
    region = params.pop(REGION)
    if not isinstance(region, str) or not region:
        raise InvalidArgument(f"{where}: parameter '{REGION}' must be a registered region's name; got {region!r}")
    return RegionSlice(region, _integer(params, BYTE_SIZE, where, None), _integer(params, OFFSET, where, 0))


@dataclass(slots=True)
class _Region:
    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}

    def close(self) -> None:
        # a request still reading or writing a view keeps the mapping: it goes with its last view
        with contextlib.suppress(BufferError):
            self.mapping.close()


def _map(key: str, offset: int, byte_size: int) -> mmap.mmap:
    """Map the whole object named by ``key``; refuse anything but a large enough regular file in /dev/shm."""
    path = check_shm_key(key)
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise NotFound(
            f"Unable to open shared memory region: '{key}' ({exc.strerror}); create it with shm_open on the "
            "server's machine first: regions are local to the server"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidArgument(f"Invalid shared memory region: '{key}' is not a shared-memory object")
        if offset + byte_size > info.st_size:
            raise InvalidArgument(
                f"Invalid shared memory region: '{key}': offset {offset} + byte_size {byte_size} runs past its "
                f"{info.st_size} bytes"
            )
        return mmap.mmap(fd, info.st_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)


class SystemSharedMemory:
    """The regions registered with one server, by name; safe to use from the event loop and threads."""

    def __init__(self) -> None:
        self._regions: dict[str, _Region] = {}
        self._lock = threading.Lock()

    # ----- register, status, unregister -----
    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map ``byte_size`` bytes at ``offset`` of the object ``key`` under ``name``."""
        if not isinstance(name, str) or not name:
            raise InvalidArgument("shared memory region: 'name' must be a non-empty string")
        for field, value in (("offset", offset), ("byte_size", byte_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidArgument(f"shared memory region '{name}': '{field}' must be a non-negative integer")
        if byte_size == 0:
            raise InvalidArgument(f"shared memory region '{name}': 'byte_size' must be at least 1")
        with self._lock:
            if name in self._regions:
                raise AlreadyExists(f"shared memory region '{name}' already in manager; unregister it first")
            self._regions[name] = _Region(name, key, offset, byte_size, _map(key, offset, byte_size))

    def status(self, name: str = "") -> list[dict[str, Any]]:
        """Every region (or the one named) as Triton's status rows: name, key, offset, byte_size."""
        with self._lock:
            if not name:
                return [r.status() for r in self._regions.values()]
            region = self._regions.get(name)
        if region is None:
            raise NotFound(f"Unable to find system shared memory region: '{name}'")
        return [region.status()]

    def unregister(self, name: str = "") -> None:
        """Forget one region (or all when ``name`` is empty); an unknown name is not an error (Triton's rule)."""
        with self._lock:
            gone = list(self._regions.values()) if not name else [r for r in [self._regions.get(name)] if r]
            for region in gone:
                del self._regions[region.name]
        for region in gone:
            region.close()

    def close(self) -> None:
        self.unregister()

    # ----- tensors -----
    def _view(self, where: RegionSlice) -> memoryview:
        region = self._regions.get(where.region)
        if region is None:
            raise NotFound(f"Unable to find shared memory region: '{where.region}'")
        if where.offset + where.byte_size > region.byte_size:
            raise InvalidArgument(
                f"Invalid offset + byte size for shared memory region: '{where.region}' (offset {where.offset} + "
                f"byte size {where.byte_size} > the region's {region.byte_size} bytes)"
            )
        start = region.offset + where.offset
        try:
            return memoryview(region.mapping)[start : start + where.byte_size]
        except ValueError:  # unregistered (and closed) while this request was on its way
            raise NotFound(f"Unable to find shared memory region: '{where.region}'") from None

    def read(self, where: RegionSlice, datatype: DataType, shape: tuple[int, ...], name: str) -> np.ndarray:
        """Input ``name`` as a read-only array over the region (no copy); its size must match exactly."""
        array = array_from_raw(self._view(where).toreadonly(), datatype, shape, name)
        if array.dtype != object:
            array.flags.writeable = False
        return array

    def write(self, where: RegionSlice, array: np.ndarray, datatype: DataType, name: str) -> None:
        """Output ``name`` into the region; the region slice must hold all of it."""
        raw: bytes | None = array_to_raw(array, datatype) if datatype is DataType.BYTES else None
        needed = len(raw) if raw is not None else array.nbytes
        if needed > where.byte_size:
            raise InvalidArgument(
                f"shared memory size specified with the request for output '{name}' ({where.byte_size} bytes) "
                f"should be at least {needed} bytes to hold the results"
            )
        view = self._view(where)
        if raw is not None:
            view[:needed] = raw
            return
        target = np.frombuffer(view, dtype=array.dtype, count=array.size).reshape(array.shape)
        np.copyto(target, array)


class SharedMemory:
    """The server's system and CUDA regions; inputs and outputs name a region of either kind."""

    def __init__(self) -> None:
        self.system = SystemSharedMemory()
        self.cuda = CudaSharedMemory()

    def extensions(self) -> tuple[str, ...]:
        """The extension names to list in the server metadata: CUDA only where it can work."""
        return (EXTENSION, CUDA_EXTENSION) if self.cuda.available else (EXTENSION,)

    def read(self, where: RegionSlice, datatype: DataType, shape: tuple[int, ...], name: str) -> np.ndarray:
        if self.cuda.has(where.region):
            return self.cuda.read(where.region, where.offset, where.byte_size, datatype, shape, name)
        return self.system.read(where, datatype, shape, name)

    def write(self, where: RegionSlice, array: np.ndarray, datatype: DataType, name: str) -> None:
        if self.cuda.has(where.region):
            self.cuda.write(where.region, where.offset, where.byte_size, array, datatype, name)
        else:
            self.system.write(where, array, datatype, name)

    def close(self) -> None:
        self.system.close()
        self.cuda.close()
