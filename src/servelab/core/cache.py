"""Response cache (Triton's ``response_cache { enable: true }``): LRU, bounded by bytes, thread-safe.

The key is a BLAKE2b digest of the model name, version and every input's name, dtype, shape and bytes
(BYTES tensors are length-prefixed element by element, since an object array's memory holds pointers).
Stored outputs are private read-only copies, handed out without copying; a response larger than the
whole cache is not stored. Hits and misses are counted by the scheduler in ModelStats.record_cache.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import numpy as np

from servelab.backends.base import Inputs, Outputs

__all__ = ["DEFAULT_CACHE_BYTES", "ResponseCache", "cache_key"]

#: Size of a cache built for one model version when the server passes none (Triton's local cache
#: has no default size; 64 MiB holds ~16k responses of 1k floats).
DEFAULT_CACHE_BYTES = 64 * 1024 * 1024


def cache_key(model: str, version: int, inputs: Inputs) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    h.update(f"{model}\0{version}\0".encode())
    for name in sorted(inputs):
        array = inputs[name]
        h.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
        if array.dtype == object:
            for item in array.reshape(-1):
                data = item if isinstance(item, bytes) else str(item).encode()
                h.update(len(data).to_bytes(8, "little"))
                h.update(data)
        else:
            h.update(np.ascontiguousarray(array).data)
    return h.digest()


def _nbytes(outputs: Outputs) -> int:
    total = 0
    for array in outputs.values():
        total += array.nbytes
        if array.dtype == object:
            total += sum(len(x) if isinstance(x, bytes | str) else 64 for x in array.reshape(-1))
    return total + 64 * len(outputs)


class ResponseCache:
    """Least-recently-used map of input digest -> outputs, at most ``max_bytes`` of output data."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if max_bytes <= 0:
            raise ValueError(f"cache size must be > 0 bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[bytes, tuple[Outputs, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def used_bytes(self) -> int:
        return self._bytes

    def get(self, key: bytes) -> Outputs | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[0]

    def put(self, key: bytes, outputs: Outputs) -> bool:
        """Store a read-only copy; False when the response alone exceeds the cache."""
        size = _nbytes(outputs)
        if size > self.max_bytes:
            return False
        frozen: Outputs = {}
        for name, array in outputs.items():
            copy = np.array(array, copy=True)
            copy.flags.writeable = False
            frozen[name] = copy
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (frozen, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._bytes -= evicted
                self.evictions += 1
        return True

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
