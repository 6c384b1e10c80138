"""Triton's CUDA shared-memory extension: GPU buffers a client on this machine shares by CUDA IPC handle.

The client allocates device memory, takes its ``cudaIpcMemHandle_t`` (``tritonclient.utils.
cuda_shared_memory``) and registers the raw handle with a device id and byte size; the server opens it with
``cudaIpcOpenMemHandle`` and copies each input from, and each output to, the device buffer (this server's
runtimes read host memory). It needs NVIDIA's ``cuda-python`` (``cuda.bindings.runtime``, imported only
when the first region is registered) and a GPU: without them :meth:`CudaSharedMemory.register` is
UNSUPPORTED, saying so, while status answers an empty list and unregister nothing to do, as Triton's
examples expect when they clear regions first. Like system shared memory, the regions are local: a CUDA IPC
handle means something only on the machine (and GPU) where it was made.

Written against cuda-python 12/13's runtime bindings; the machines this project is developed on have no
GPU, so this path is exercised only where one exists (tests/integration/test_cuda_shared_memory.py).
"""

from __future__ import annotations

import ctypes
import importlib
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from servelab.errors import AlreadyExists, InvalidArgument, NotFound, Unavailable, Unsupported
from servelab.protocol.codecs import array_from_raw, array_to_raw
from servelab.types import DataType

__all__ = ["CUDA_EXTENSION", "CUDA_UNSUPPORTED", "CudaSharedMemory"]

CUDA_EXTENSION = "cuda_shared_memory"
CUDA_UNSUPPORTED = (
    "CUDA shared memory is not supported by this server: it needs a GPU and NVIDIA's cuda-python package "
    "(pip install cuda-python); use system shared memory (register_system_shared_memory) or send the tensors "
    "in the request"
)
_HANDLE_SIZE = 64  # CUDA_IPC_HANDLE_SIZE


def _runtime() -> Any | None:
    """``cuda.bindings.runtime`` when it imports and sees at least one device, else None."""
    try:
        cudart = importlib.import_module("cuda.bindings.runtime")
    except ImportError:
        return None
    err, count = cudart.cudaGetDeviceCount()
    return cudart if err == cudart.cudaError_t.cudaSuccess and count > 0 else None


def _call(cudart: Any, what: str, function: Any, *args: Any) -> Any:
    result = function(*args)
    err = result[0]
    if err != cudart.cudaError_t.cudaSuccess:
        _, text = cudart.cudaGetErrorString(err)
        raise Unavailable(f"CUDA shared memory: {what} failed: {text.decode(errors='replace')}")
    return result[1] if len(result) == 2 else None


@dataclass(slots=True)
class _CudaRegion:
    name: str
    device_id: int
    byte_size: int
    pointer: int

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "device_id": self.device_id, "byte_size": self.byte_size}


class CudaSharedMemory:
    """The CUDA regions registered with one server, by name."""

    def __init__(self) -> None:
        self._regions: dict[str, _CudaRegion] = {}
        self._lock = threading.Lock()
        self._cudart: Any = None  # cuda.bindings.runtime once probed and found
        self._probed = False

    @property
    def available(self) -> bool:
        """Whether regions can be registered here (cuda-python imports and a GPU is visible)."""
        if not self._probed:
            self._cudart, self._probed = _runtime(), True
        return self._cudart is not None

    def has(self, name: str) -> bool:
        return name in self._regions

    def register(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        if not self.available:
            raise Unsupported(CUDA_UNSUPPORTED)
        cudart = self._cudart
        if len(raw_handle) != _HANDLE_SIZE:
            raise InvalidArgument(
                f"'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t ({_HANDLE_SIZE} bytes); got "
                f"{len(raw_handle)} bytes"
            )
        if byte_size <= 0 or device_id < 0:
            raise InvalidArgument(f"cuda shared memory region '{name}': byte_size must be >= 1 and device_id >= 0")
        with self._lock:
            if name in self._regions:
                raise AlreadyExists(f"shared memory region '{name}' already in manager; unregister it first")
            _call(cudart, "cudaSetDevice", cudart.cudaSetDevice, device_id)
            handle = cudart.cudaIpcMemHandle_t()
            ctypes.memmove(handle.getPtr(), raw_handle, _HANDLE_SIZE)
            flags = cudart.cudaIpcMemLazyEnablePeerAccess
            pointer = _call(cudart, "cudaIpcOpenMemHandle", cudart.cudaIpcOpenMemHandle, handle, flags)
            self._regions[name] = _CudaRegion(name, device_id, byte_size, int(pointer))

    def status(self, name: str = "") -> list[dict[str, Any]]:
        with self._lock:
            if not name:
                return [r.status() for r in self._regions.values()]
            region = self._regions.get(name)
        if region is None:
            raise NotFound(f"Unable to find cuda shared memory region: '{name}'")
        return [region.status()]

    def unregister(self, name: str = "") -> None:
        with self._lock:
            gone = list(self._regions.values()) if not name else [r for r in [self._regions.get(name)] if r]
            for region in gone:
                del self._regions[region.name]
        for region in gone:
            _call(self._cudart, "cudaIpcCloseMemHandle", self._cudart.cudaIpcCloseMemHandle, region.pointer)

    def close(self) -> None:
        if self._regions:
            self.unregister()

    # ----- tensors: copies between the device buffer and host memory -----
    def _slice(self, name: str, offset: int, byte_size: int) -> _CudaRegion:
        region = self._regions.get(name)
        if region is None:
            raise NotFound(f"Unable to find shared memory region: '{name}'")
        if offset + byte_size > region.byte_size:
            raise InvalidArgument(f"Invalid offset + byte size for shared memory region: '{name}'")
        return region

    def read(self, name: str, offset: int, byte_size: int, datatype: DataType, shape: tuple[int, ...],
             tensor: str) -> np.ndarray:  # fmt: skip
        region = self._slice(name, offset, byte_size)
        cudart = self._cudart
        host = np.empty(byte_size, dtype=np.uint8)
        _call(cudart, "cudaSetDevice", cudart.cudaSetDevice, region.device_id)
        _call(cudart, "cudaMemcpy", cudart.cudaMemcpy, host.ctypes.data, region.pointer + offset, byte_size,
              cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost)  # fmt: skip
        return array_from_raw(host.data, datatype, shape, tensor)

    def write(self, name: str, offset: int, byte_size: int, array: np.ndarray, datatype: DataType, tensor: str) -> None:
        raw = array_to_raw(array, datatype) if datatype is DataType.BYTES else np.ascontiguousarray(array).tobytes()
        if len(raw) > byte_size:
            raise InvalidArgument(
                f"shared memory size specified with the request for output '{tensor}' ({byte_size} bytes) "
                f"should be at least {len(raw)} bytes to hold the results"
            )
        region = self._slice(name, offset, byte_size)
        cudart = self._cudart
        host = np.frombuffer(raw, dtype=np.uint8)
        _call(cudart, "cudaSetDevice", cudart.cudaSetDevice, region.device_id)
        _call(cudart, "cudaMemcpy", cudart.cudaMemcpy, region.pointer + offset, host.ctypes.data, len(raw),
              cudart.cudaMemcpyKind.cudaMemcpyHostToDevice)  # fmt: skip
