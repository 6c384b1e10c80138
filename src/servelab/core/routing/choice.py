"""Which arm of a weighted split one request takes: random by weight, or sticky by a request key.

Sticky choice is weighted rendezvous hashing: every arm scores ``-ln(u) / weight`` with ``u`` a
uniform hash of (arm name, key), and the lowest score wins. The same key always lands on the same
arm (in every process and replica: blake2b, not Python's salted ``hash``), and when weights change
only keys move *to* an arm whose weight grew, never between arms that kept theirs: a user on the
canary at 5% is still on it at 20%.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence

__all__ = ["pick_random", "pick_sticky", "unit_hash"]

_SCALE = float(2**64)


def unit_hash(arm: str, key: str) -> float:
    """A uniform number in (0, 1) from (arm, key), the same in every process."""
    text = f"{arm}\0{key}".encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(text, digest_size=8, person=b"servelab-route")
    return (int.from_bytes(digest.digest(), "big") + 0.5) / _SCALE


def pick_sticky(arms: Sequence[str], weights: Sequence[float], key: str) -> int:
    """Index of the arm ``key`` belongs to (weights >= 0, at least one positive)."""
    best, best_score = -1, math.inf
    for i, (arm, weight) in enumerate(zip(arms, weights, strict=True)):
        if weight <= 0:
            continue
        score = -math.log(unit_hash(arm, key)) / weight
        if score < best_score:
            best, best_score = i, score
    return best


def pick_random(cumulative: Sequence[float], rng: random.Random | None = None) -> int:
    """Index drawn by weight, ``cumulative`` being the running sums of the weights (last = total)."""
    x = (rng or random).random() * cumulative[-1]
    for i, bound in enumerate(cumulative):
        if x < bound:
            return i
    return len(cumulative) - 1
