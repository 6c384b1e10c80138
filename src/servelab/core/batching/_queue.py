"""The batcher's pending requests: one FIFO per priority level (plus its DELAYed requests), timeouts
kept in a heap, and the plan of the next batch. Not thread-safe: the batcher holds its lock around
every call. Removal is lazy (a request's ``state`` changes and its slot is skipped), so dropping a
disconnected client's request or expiring one is O(1) / O(log n).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from itertools import count

from servelab.backends.base import Inputs, Outputs
from servelab.core.batching._policy import BatchPolicy
from servelab.errors import ResourceExhausted, ServelabError

__all__ = ["Pending", "Plan", "RequestQueue", "State"]

_ids = count()


class State(IntEnum):
    QUEUED = 0
    DELAYED = 1  #: timed out under the DELAY action: served after its level's other requests
    TAKEN = 2  #: in a batch
    DROPPED = 3  #: cancelled by its client or rejected on timeout


@dataclass(slots=True, eq=False)
class Pending:
    """One queued request and how to hand back its result (thread-safe callable)."""

    inputs: Inputs
    rows: int
    #: names, dtypes and non-batch dims: only requests with equal keys share a batch
    shape_key: tuple[object, ...]
    level: int
    enqueue_ns: int
    deadline_ns: int
    reject_on_timeout: bool
    deliver: Callable[[Outputs | ServelabError], None]
    state: State = State.QUEUED
    seq: int = field(default_factory=lambda: next(_ids))


@dataclass(frozen=True, slots=True)
class Plan:
    """What the head of the queue would make: ``count`` requests, ``rows`` rows."""

    count: int
    rows: int
    #: no further request fits (max_batch_size reached, or the next one is too big or differs in shape)
    full: bool
    #: requests up to the largest preferred size reached on the way (0: none reached)
    preferred_count: int
    oldest_ns: int


class RequestQueue:
    def __init__(self, policy: BatchPolicy) -> None:
        self.policy = policy
        self._normal: list[deque[Pending]] = [deque() for _ in range(policy.levels)]
        self._delayed: list[deque[Pending]] = [deque() for _ in range(policy.levels)]
        self._sizes = [0] * policy.levels
        self._deadlines: list[tuple[int, int, Pending]] = []

    def __len__(self) -> int:
        return sum(self._sizes)

    def push(self, p: Pending) -> None:
        i = p.level - 1
        bound = self.policy.queues[i].max_queue_size
        if self._sizes[i] >= bound:
            raise ResourceExhausted(
                f"queue of priority level {p.level} is full ({bound} requests, max_queue_size); "
                "retry later or raise dynamic_batching.default_queue_policy.max_queue_size"
            )
        self._normal[i].append(p)
        self._sizes[i] += 1
        if p.deadline_ns:
            heapq.heappush(self._deadlines, (p.deadline_ns, p.seq, p))

    def drop(self, p: Pending) -> bool:
        """Forget a queued request (its client went away); False when it is already in a batch."""
        if p.state not in (State.QUEUED, State.DELAYED):
            return False
        p.state = State.DROPPED
        self._sizes[p.level - 1] -= 1
        return True

    def next_deadline(self) -> int | None:
        while self._deadlines and self._deadlines[0][2].state != State.QUEUED:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None

    def expire(self, now_ns: int) -> list[Pending]:
        """Apply timeouts that passed: REJECT drops (returned, for the caller to fail), DELAY demotes."""
        rejected: list[Pending] = []
        while self._deadlines and self._deadlines[0][0] <= now_ns:
            _, _, p = heapq.heappop(self._deadlines)
            if p.state != State.QUEUED:
                continue
            if p.reject_on_timeout:
                p.state = State.DROPPED
                self._sizes[p.level - 1] -= 1
                rejected.append(p)
            else:
                p.state = State.DELAYED
                self._delayed[p.level - 1].append(p)
        return rejected

    def live(self) -> Iterator[Pending]:
        """Queued requests in service order: level 1 first; in a level FIFO, then its delayed ones."""
        for normal, delayed in zip(self._normal, self._delayed, strict=True):
            for p in normal:
                if p.state == State.QUEUED:
                    yield p
            for p in delayed:
                if p.state == State.DELAYED:
                    yield p

    def plan(self) -> Plan:
        policy = self.policy
        preferred = policy.preferred
        rows = n = pref_n = 0
        oldest = 0
        full = False
        key: tuple[object, ...] | None = None
        for p in self.live():
            if n == 0:
                key = p.shape_key
            elif p.shape_key != key or rows + p.rows > policy.max_batch_size:
                full = True
                break
            rows += p.rows
            n += 1
            oldest = p.enqueue_ns if n == 1 else min(oldest, p.enqueue_ns)
            if rows in preferred:
                pref_n = n
            if rows >= policy.max_batch_size:
                full = True
                break
        return Plan(n, rows, full, pref_n, oldest)

    def take(self, n: int) -> list[Pending]:
        """Remove and return the first ``n`` queued requests in service order."""
        taken: list[Pending] = []
        for p in self.live():
            if len(taken) == n:
                break
            taken.append(p)
        for p in taken:
            p.state = State.TAKEN
            self._sizes[p.level - 1] -= 1
        for normal, delayed in zip(self._normal, self._delayed, strict=True):
            while normal and normal[0].state != State.QUEUED:
                normal.popleft()
            while delayed and delayed[0].state != State.DELAYED:
                delayed.popleft()
        return taken

    def drain(self) -> list[Pending]:
        """Remove every queued request (shutdown); returns them for the caller to fail."""
        out = list(self.live())
        for p in out:
            p.state = State.DROPPED
        for dq in (*self._normal, *self._delayed):
            dq.clear()
        self._sizes = [0] * self.policy.levels
        self._deadlines.clear()
        return out
