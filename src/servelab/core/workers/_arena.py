"""Shared-memory arenas: where tensor bytes cross between the server and a worker process.

Each direction of a channel has one writer. The writer owns its arena: anonymous memory files
(``memfd``) mapped on both sides, cut into 64-byte aligned blocks by a first-fit free list (one
block per message, holding all its tensors). A block belongs to an *owner* (a request id, or a
message sequence number) and is released with it. When a block does not fit, the writer maps a
new segment twice as large (or as large as needed) and hands its file descriptor to the reader (the
channel sends it before the message that uses it); older segments are dropped once their last block
is released. Nothing has a name in ``/dev/shm``: a worker that is SIGKILLed leaks nothing, the
memory goes when no process maps it any more.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterable

__all__ = ["ALIGN", "ArenaReader", "ArenaWriter"]

ALIGN = 64
_MIN_SEGMENT = 1 << 20


def aligned(n: int) -> int:
    return (n + ALIGN - 1) & ~(ALIGN - 1)


class _Segment:
    __slots__ = ("fd", "free", "id", "map", "size", "used")

    def __init__(self, seg_id: int, size: int, label: str) -> None:
        fd = os.memfd_create(f"servelab-{label}-{seg_id}", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self.id, self.size, self.fd = seg_id, size, fd
        self.free: list[list[int]] = [[0, size]]  # sorted [offset, size] runs
        self.used: dict[int, int] = {}  # offset -> size of live blocks

    def take(self, n: int) -> int:
        """Offset of a free run of ``n`` bytes, or -1."""
        for i, run in enumerate(self.free):
            if run[1] >= n:
                offset = run[0]
                if run[1] == n:
                    del self.free[i]
                else:
                    run[0] += n
                    run[1] -= n
                self.used[offset] = n
                return offset
        return -1

    def give_back(self, offset: int) -> None:
        n = self.used.pop(offset)
        runs = self.free
        i = 0
        while i < len(runs) and runs[i][0] < offset:
            i += 1
        runs.insert(i, [offset, n])
        if i + 1 < len(runs) and offset + n == runs[i + 1][0]:  # coalesce with the next run
            runs[i][1] += runs.pop(i + 1)[1]
        if i > 0 and runs[i - 1][0] + runs[i - 1][1] == offset:  # ... and the previous one
            runs[i - 1][1] += runs.pop(i)[1]

    def unmap(self) -> None:
        with contextlib.suppress(BufferError):  # a view is still alive somewhere: it goes with that
            self.map.close()
        os.close(self.fd)


class ArenaWriter:
    """The writing side of one direction. Not thread-safe: the channel's send lock guards it."""

    def __init__(self, initial_bytes: int, label: str) -> None:
        self.label = label
        self._next_id = 0
        self._segments: dict[int, _Segment] = {}
        self._current = self._new_segment(initial_bytes)
        self._owned: dict[int, list[tuple[_Segment, int]]] = {}
        #: segments mapped but not yet announced to the reader: (id, fd, size)
        self.announce: list[tuple[int, int, int]] = [(self._current.id, self._current.fd, self._current.size)]

    def _new_segment(self, size: int) -> _Segment:
        segment = _Segment(self._next_id, max(_MIN_SEGMENT, aligned(size)), self.label)
        self._segments[segment.id] = segment
        self._next_id += 1
        return segment

    def alloc(self, nbytes: int, owner: int) -> tuple[int, int, mmap.mmap]:
        """(segment id, offset, mapping) of a block of ``nbytes`` for ``owner``; may map a new segment."""
        n = aligned(nbytes)
        seg = self._current
        offset = seg.take(n)
        if offset < 0:
            old = seg
            seg = self._current = self._new_segment(max(2 * seg.size, 2 * n))
            self.announce.append((seg.id, seg.fd, seg.size))
            offset = seg.take(n)
            if not old.used:
                self._drop(old)
        blocks = self._owned.get(owner)
        if blocks is None:
            self._owned[owner] = [(seg, offset)]
        else:
            blocks.append((seg, offset))
        return seg.id, offset, seg.map

    def release(self, owners: Iterable[int]) -> None:
        """Free every block of these owners; segments other than the current one go when empty."""
        for owner in owners:
            for seg, offset in self._owned.pop(owner, ()):
                seg.give_back(offset)
                if not seg.used and seg is not self._current:
                    self._drop(seg)

    def _drop(self, seg: _Segment) -> None:
        del self._segments[seg.id]
        self.announce = [a for a in self.announce if a[0] != seg.id]  # never announced: never will be
        seg.unmap()

    def release_upto(self, last: int) -> None:
        """Free the blocks of every owner <= ``last`` (owners that are message sequence numbers)."""
        done = [o for o in self._owned if o <= last]
        if done:
            self.release(done)

    @property
    def blocks(self) -> int:
        return sum(len(b) for b in self._owned.values())

    def close(self) -> None:
        for seg in self._segments.values():
            seg.unmap()
        self._segments.clear()
        self._owned.clear()


class ArenaReader:
    """The reading side: the peer's segments by id. Arrays made from them keep their mapping alive."""

    def __init__(self) -> None:
        self.maps: dict[int, mmap.mmap] = {}

    def attach(self, segment: int, fd: int, size: int) -> None:
        """Map a segment the peer announced; older ones are forgotten (no later message names them).

        The mapping itself lives on while numpy views made from it exist.
        """
        try:
            view = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        for old in [s for s in self.maps if s < segment]:
            del self.maps[old]
        self.maps[segment] = view
