"""Where each sequence's requests wait: a batch slot of one instance, or the backlog.

Triton's rules (docs/user_guide/architecture.md, "Stateful Models"): a request that starts a sequence
takes a free slot (the lowest slot index, so sequences spread over the instances first) or, with none
free, waits in a backlog; a later request of that sequence goes where the sequence is; when the END
request is taken into a batch its slot goes to the oldest backlogged sequence, with every request that
sequence collected meanwhile. A sequence with no request queued for ``max_sequence_idle_microseconds``
loses its slot (its next request must START again). A request that does not start a sequence and whose
id is known nowhere fails. When a client cancels one queued request, its whole sequence is cancelled:
the other queued requests fail and the slot is freed, as in Triton.

Not thread-safe: the sequence batcher holds its lock around every call.
"""

from __future__ import annotations

import heapq
import logging
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from servelab.backends.base import Inputs, Outputs
from servelab.core.batching._sequence_policy import SequenceId, SequenceRequest
from servelab.errors import InvalidArgument, ServelabError

__all__ = ["SeqPending", "SeqState", "Slot", "SlotTable"]

log = logging.getLogger("servelab.batching")


@dataclass(slots=True, eq=False)
class SeqState:
    """One sequence's implicit state (input name -> array, batch dimension included); empty at first."""

    sequence_id: SequenceId
    values: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class SeqPending:
    """One queued request of a sequence and how to hand back its result (thread-safe callable)."""

    inputs: Inputs
    seq: SequenceRequest
    enqueue_ns: int
    deliver: Callable[[Outputs | ServelabError], None]
    #: names, dtypes and non-batch dims: only requests with equal keys share a batch
    shape_key: tuple[object, ...]
    #: the sequence's state holder, set when the request reaches a slot
    state: SeqState | None = None


@dataclass(slots=True, eq=False)
class Slot:
    lane: int
    index: int
    sequence_id: SequenceId | None = None
    state: SeqState | None = None
    queue: deque[SeqPending] = field(default_factory=deque)
    #: when a request of its sequence last arrived or finished (the idle clock)
    touched_ns: int = 0


@dataclass(slots=True, eq=False)
class _Backlog:
    sequence_id: SequenceId
    queue: deque[SeqPending] = field(default_factory=deque)


class SlotTable:
    """The slots of every instance (``lanes`` x ``slots``), the backlog and the id -> place maps."""

    def __init__(self, lanes: int, slots: int, idle_ns: int) -> None:
        self.lanes = [[Slot(lane, i) for i in range(slots)] for lane in range(lanes)]
        self.idle_ns = idle_ns
        self._free: list[tuple[int, int]] = [(i, lane) for lane in range(lanes) for i in range(slots)]
        heapq.heapify(self._free)
        self._assigned: dict[SequenceId, Slot] = {}
        self._backlog: deque[_Backlog] = deque()
        #: backlogged sequences still collecting requests (their END has not come)
        self._collecting: dict[SequenceId, _Backlog] = {}

    def __len__(self) -> int:
        return sum(len(s.queue) for s in self._slots()) + sum(len(b.queue) for b in self._backlog)

    # ----- arrivals -----
    def place(self, p: SeqPending, model: str, now_ns: int) -> Slot | None:
        """Queue ``p`` where its sequence is: its slot (returned) or the backlog (None)."""
        sid = p.seq.sequence_id
        slot, backlog = self._assigned.get(sid), self._collecting.get(sid)
        if not p.seq.start and slot is None and backlog is None:
            raise InvalidArgument(
                f"inference request for sequence {sid} to model '{model}' must specify the START flag on the "
                "first request of the sequence"
            )
        if p.seq.start and (slot is not None or backlog is not None):
            log.warning("sequence %s of model '%s' started again before it ended; it goes on in its place", sid, model)
        if slot is None and backlog is None and self._free:
            index, lane = heapq.heappop(self._free)
            slot = self.lanes[lane][index]
            slot.sequence_id, slot.state = sid, SeqState(sid)
            self._assigned[sid] = slot
        if slot is not None:
            p.state = slot.state
            slot.queue.append(p)
            slot.touched_ns = now_ns
            if p.seq.end:
                self._forget(slot)
            return slot
        if backlog is None:
            backlog = _Backlog(sid)
            self._backlog.append(backlog)
            self._collecting[sid] = backlog
        backlog.queue.append(p)
        if p.seq.end:
            del self._collecting[sid]
        return None

    # ----- forming batches -----
    def take(self, slot: Slot, now_ns: int) -> SeqPending:
        """Take the head of ``slot`` into a batch; an END frees the slot for the backlog."""
        p = slot.queue.popleft()
        if p.seq.end:
            self._release(slot, now_ns)
        return p

    def finished(self, p: SeqPending, slot: Slot, now_ns: int) -> None:
        """A request of the sequence in ``slot`` was answered: its idle clock restarts."""
        if slot.state is p.state:
            slot.touched_ns = now_ns

    def reap(self, lane: int, now_ns: int) -> int | None:
        """Free the slots of ``lane`` whose sequence was idle too long; the next idle deadline, if any."""
        deadline: int | None = None
        for slot in self.lanes[lane]:
            if slot.sequence_id is None or slot.queue:
                continue
            due = slot.touched_ns + self.idle_ns
            if now_ns >= due:
                log.info("sequence %s idle for over %.3g s: its slot is freed", slot.sequence_id, self.idle_ns / 1e9)
                self._forget(slot)
                self._release(slot, now_ns)
                if slot.sequence_id is not None:  # a backlogged sequence moved in
                    due = slot.touched_ns + self.idle_ns
                    deadline = due if deadline is None else min(deadline, due)
                continue
            deadline = due if deadline is None else min(deadline, due)
        return deadline

    # ----- cancellation and shutdown -----
    def cancel(self, p: SeqPending, now_ns: int) -> list[SeqPending]:
        """``p``'s client went away: drop its sequence; returns the queued requests to fail (``p`` too),
        or [] when ``p`` is no longer queued (it is being executed)."""
        for slot in self._slots():
            if p in slot.queue:
                dropped = list(slot.queue)
                slot.queue.clear()
                self._forget(slot)
                self._release(slot, now_ns)
                return dropped
        for backlog in self._backlog:
            if p in backlog.queue:
                self._backlog.remove(backlog)
                if self._collecting.get(backlog.sequence_id) is backlog:
                    del self._collecting[backlog.sequence_id]
                return list(backlog.queue)
        return []

    def drain(self) -> list[SeqPending]:
        """Remove every queued request (shutdown); returns them for the caller to fail."""
        out = [p for s in self._slots() for p in s.queue] + [p for b in self._backlog for p in b.queue]
        for slot in self._slots():
            slot.queue.clear()
        self._backlog.clear()
        self._collecting.clear()
        return out

    # ----- internals -----
    def _slots(self) -> Iterator[Slot]:
        for lane in self.lanes:
            yield from lane

    def _forget(self, slot: Slot) -> None:
        """Requests with this slot's id no longer go to it (an END is queued, or it idled out)."""
        if slot.sequence_id is not None and self._assigned.get(slot.sequence_id) is slot:
            del self._assigned[slot.sequence_id]

    def _release(self, slot: Slot, now_ns: int) -> None:
        """The slot's sequence is over: the oldest backlogged sequence moves in, or the slot is free."""
        slot.sequence_id, slot.state = None, None
        if not self._backlog:
            heapq.heappush(self._free, (slot.index, slot.lane))
            return
        backlog = self._backlog.popleft()
        sid = backlog.sequence_id
        slot.sequence_id, slot.state = sid, SeqState(sid)
        slot.queue.extend(backlog.queue)
        slot.touched_ns = now_ns
        for q in backlog.queue:
            q.state = slot.state
        if self._collecting.get(sid) is backlog:  # its END has not come: later requests go to the slot
            del self._collecting[sid]
            self._assigned[sid] = slot
