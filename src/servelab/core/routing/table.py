"""One model's routing as an immutable snapshot, rebuilt whenever a load, the API or a gate changes it.

The table merges, lowest first: TF Serving's ``version_labels`` (from the config the TF Serving loader
wrote), the policy file, what the management API and rollouts decided (persisted), and the implicit
``stable`` / ``canary`` labels of a running rollout. Requests read the table without a lock (a dict
lookup and attribute reads); a change swaps in a new table.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from servelab.core.routing.policy import RoutingPolicy, Sticky
from servelab.core.routing.rollout import CANARY, STABLE, Rollout
from servelab.core.routing.store import ModelRouting
from servelab.core.routing.windows import Comparison

__all__ = ["Arm", "RouteTable", "ShadowPlan", "Target", "build_table"]


@dataclass(frozen=True, slots=True)
class Target:
    """A model and a version of it (None: that model's newest)."""

    model: str
    version: int | None = None


@dataclass(frozen=True, slots=True)
class Arm:
    """One variant of the unversioned requests and its weight."""

    name: str
    target: Target
    weight: float


@dataclass(frozen=True)
class ShadowPlan:
    """Copies of live requests of the model (not of ``target`` itself) to ``target``, compared."""

    target: Target
    sample: float
    comparison: Comparison


@dataclass(frozen=True)
class RouteTable:
    model: str
    labels: dict[str, int] = field(default_factory=dict)
    #: label or version of unversioned requests, when no split or rollout decides (None: the newest)
    default: str | None = None
    arms: tuple[Arm, ...] = ()
    sticky: Sticky | None = None
    shadow: ShadowPlan | None = None
    rollout: Rollout | None = None
    arm_names: tuple[str, ...] = ()
    weights: tuple[float, ...] = ()
    cumulative: tuple[float, ...] = ()

    def default_target(self) -> Target:
        """Where a request without a version goes when no split or rollout picks (labels resolved)."""
        choice = self.default
        if choice is None:
            return Target(self.model)
        if choice.isdigit():
            return Target(self.model, int(choice))
        version = self.labels.get(choice)
        return Target(self.model, version) if version is not None else Target(self.model)


def _arms(model: str, policy: RoutingPolicy | None) -> tuple[Arm, ...]:
    if policy is None or not policy.split:
        return ()
    return tuple(Arm(v.label(model), Target(v.model or model, v.version), v.weight) for v in policy.split)


def build_table(
    model: str,
    tf_labels: dict[str, int],
    policy: RoutingPolicy | None,
    persisted: ModelRouting | None,
    rollout: Rollout | None,
    shadow: ShadowPlan | None,
    source_default: int | None = None,
) -> RouteTable | None:
    """The merged table, or None when nothing routes this model (requests take the plain path). The
    default is, weakest first: the model's files' (a TorchServe archive's), the policy's, the pinned one."""
    labels = dict(tf_labels)
    default = str(source_default) if source_default is not None else None
    if policy is not None:
        labels.update(policy.labels)
        default = policy.default
    if persisted is not None:
        labels.update(persisted.labels)
        default = persisted.default if persisted.default is not None else default
    active = rollout if rollout is not None and rollout.state.status.active else None
    if active is not None:
        labels[STABLE], labels[CANARY] = active.state.stable, active.state.candidate
    arms = _arms(model, policy)
    sticky = policy.sticky if policy is not None else None
    if not (labels or default or arms or shadow or active):
        return None
    weights = tuple(a.weight for a in arms)
    return RouteTable(
        model, labels, default, arms, sticky, None if active is not None else shadow, active,
        tuple(a.name for a in arms), weights, tuple(itertools.accumulate(weights)),
    )
