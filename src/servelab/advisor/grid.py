"""The candidate grid: artefact (runtime x precision) x batching x instances x threads x front door.

A :class:`Candidate` is one served configuration; :meth:`Grid.neighbours` are the configurations one step
away along one dimension (the next batching setting, one instance more or fewer, ...; and the same cores
split the other way between instances and threads), which is what the quick search climbs along. Peer
servers are not in the grid: they are measured as reference rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from servelab.errors import InvalidArgument

__all__ = ["FRONT_DOORS", "ArtefactRef", "Batching", "Candidate", "Grid", "parse_batching", "parse_ints"]

FrontDoor = Literal["rest", "grpc"]
#: targets whose label is not their backend's name (torch.export programs run on the pytorch backend too)
_TARGET_LABELS = {"torch_export": "pytorch-export"}
FRONT_DOORS: tuple[str, ...] = ("rest", "grpc")


@dataclass(frozen=True, slots=True)
class Batching:
    """Dynamic batching with ``max_batch_size`` and ``max_queue_delay_us``; size 0 means no batcher."""

    max_batch_size: int = 0
    max_queue_delay_us: int = 0

    @property
    def on(self) -> bool:
        return self.max_batch_size > 0

    @property
    def label(self) -> str:
        return f"b{self.max_batch_size}/{self.max_queue_delay_us}us" if self.on else "off"


@dataclass(frozen=True, slots=True)
class ArtefactRef:
    """A converted, parity-checked model of the convert repository."""

    model: str
    backend: str
    precision: str
    max_batch_size: int
    accuracy_drop: float = 0.0
    target: str = ""  # convert's target; named in the label where two share a backend (torch.export, TorchScript)

    @property
    def label(self) -> str:
        return f"{_TARGET_LABELS.get(self.target, self.backend)}/{self.precision}"


@dataclass(frozen=True, slots=True)
class Candidate:
    artefact: ArtefactRef
    batching: Batching
    instances: int
    threads: int
    front_door: FrontDoor

    @property
    def label(self) -> str:
        return (
            f"{self.artefact.label} {self.batching.label} x{self.instances} t{self.threads} {self.front_door}"
        )

    @property
    def server_key(self) -> tuple[object, ...]:
        """What needs a server of its own: everything but the front door (one server has both)."""
        return (self.artefact.model, self.batching, self.instances, self.threads)


def parse_ints(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        values = ()
    if not values or any(v < 1 for v in values):
        raise InvalidArgument(f"{option} {text!r}: expected whole numbers >= 1 separated by commas")
    return values


def parse_batching(text: str) -> tuple[Batching, ...]:
    """``off,8:200,32:1000`` -> no batcher, then max batch 8 with 200 us delay, 32 with 1000 us."""
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        if item == "off":
            out.append(Batching())
            continue
        size, _, delay = item.partition(":")
        try:
            batching = Batching(int(size), int(delay or 0))
        except ValueError:
            raise InvalidArgument(f"--batching {item!r}: expected off or MAX_BATCH:DELAY_US, e.g. 8:200") from None
        if batching.max_batch_size < 1 or batching.max_queue_delay_us < 0:
            raise InvalidArgument(f"--batching {item!r}: max batch must be >= 1 and delay >= 0")
        out.append(batching)
    if not out:
        raise InvalidArgument("--batching is empty; give e.g. off,8:200,32:1000")
    return tuple(out)


@dataclass
class Grid:
    artefacts: tuple[ArtefactRef, ...]
    batchings: tuple[Batching, ...] = (Batching(), Batching(8, 200), Batching(32, 1000))
    instances: tuple[int, ...] = (1, 2)
    threads: tuple[int, ...] = (1, 2)
    front_doors: tuple[str, ...] = FRONT_DOORS
    _points: list[Candidate] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.artefacts:
            raise InvalidArgument("no artefact passed its parity gate: nothing to select from")
        bad = [f for f in self.front_doors if f not in FRONT_DOORS]
        if bad or not self.front_doors:
            raise InvalidArgument(f"--front-doors {list(self.front_doors)}: expected some of {list(FRONT_DOORS)}")
        self._points = [
            Candidate(a, b, i, t, f)  # type: ignore[arg-type]
            for a in self.artefacts
            for b in self.batchings
            if b.max_batch_size <= max(a.max_batch_size, 0)
            for i in self.instances
            for t in self.threads
            for f in self.front_doors
        ]
        if not self._points:
            raise InvalidArgument(
                f"no grid point fits: every --batching size exceeds the artefacts' max_batch_size "
                f"({[a.max_batch_size for a in self.artefacts]})"
            )

    def points(self) -> list[Candidate]:
        return list(self._points)

    @property
    def size(self) -> int:
        return len(self._points)

    def contains(self, c: Candidate) -> bool:
        return c in self._points

    def restricted(self, artefacts: tuple[ArtefactRef, ...]) -> list[Candidate]:
        """The grid points of some artefacts only (the ones the in-process prune kept)."""
        keep = set(artefacts)
        return [c for c in self._points if c.artefact in keep]

    def neighbours(self, c: Candidate, artefacts: tuple[ArtefactRef, ...] | None = None) -> list[Candidate]:
        """One step along one dimension (or instances up and threads down, or back), nearest settings first;
        artefacts limited to ``artefacts``."""
        out: list[Candidate] = []
        for values, attr in ((self.batchings, "batching"), (self.instances, "instances"), (self.threads, "threads")):
            idx = values.index(getattr(c, attr))
            for j in (idx + 1, idx - 1):
                if 0 <= j < len(values):
                    out.append(replace(c, **{attr: values[j]}))  # type: ignore[arg-type]
        # the same cores split the other way (x1 t2 <-> x2 t1), the trade a CPU deployment weighs first: one step
        # along instances and one back along threads count as one step
        i, t = self.instances.index(c.instances), self.threads.index(c.threads)
        for di, dt in ((1, -1), (-1, 1)):
            if 0 <= i + di < len(self.instances) and 0 <= t + dt < len(self.threads):
                out.append(replace(c, instances=self.instances[i + di], threads=self.threads[t + dt]))
        out += [replace(c, front_door=f) for f in self.front_doors if f != c.front_door]  # type: ignore[arg-type]
        pool = artefacts if artefacts is not None else self.artefacts
        out += [replace(c, artefact=a) for a in pool if a != c.artefact]
        return [n for n in out if self.contains(n)]
