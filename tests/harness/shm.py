"""POSIX shared-memory objects made the way a client makes them (tritonclient's own helper), for the
shared-memory tests in process and over the wire: unique keys per use, every object destroyed at the end."""

from __future__ import annotations

import uuid
from typing import Any

import tritonclient.utils.shared_memory as client_shm

__all__ = ["ClientRegions"]


class ClientRegions:
    """Objects of one test, keyed ``/servelab-<scope>-<random tag>-<name>``; a context manager that destroys
    them on exit."""

    def __init__(self, scope: str) -> None:
        self.handles: list[Any] = []
        self.tag = f"{scope}-{uuid.uuid4().hex[:10]}"

    def create(self, name: str, size: int) -> tuple[Any, str]:
        """A new object of ``size`` bytes: (tritonclient's handle, its key)."""
        key = f"/servelab-{self.tag}-{name}"
        self.handles.append(client_shm.create_shared_memory_region(f"{self.tag}-{name}", key, size))
        return self.handles[-1], key

    def close(self) -> None:
        for h in self.handles:
            client_shm.destroy_shared_memory_region(h)
        self.handles.clear()

    def __enter__(self) -> ClientRegions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
