"""The only place that picks a model version: labels, A/B splits, staged canaries, shadow copies.

:class:`Router` answers "which loaded version serves this request" for every request the data plane
sees (ensemble steps and BLS calls re-enter there too); :class:`RolloutControl` starts, steps, pauses,
promotes and rolls back rollouts, evaluating their gates live; their state and every decision persist
in sqlite (:class:`RoutingStore`). The policy file beside config.pbtxt is :class:`RoutingPolicy`.
"""

from servelab.core.routing.control import ACTIONS, RolloutControl
from servelab.core.routing.outcomes import Routed, VariantStats
from servelab.core.routing.policy import POLICY_FILES, Gates, RolloutSpec, RoutingPolicy, Sticky, Variant
from servelab.core.routing.rollout import CANARY, STABLE, Rollout, RolloutState, Status
from servelab.core.routing.router import HeaderLookup, Router
from servelab.core.routing.store import ModelRouting, RoutingStore

__all__ = [
    "ACTIONS",
    "CANARY",
    "POLICY_FILES",
    "STABLE",
    "Gates",
    "HeaderLookup",
    "ModelRouting",
    "Rollout",
    "RolloutControl",
    "RolloutSpec",
    "RolloutState",
    "Routed",
    "Router",
    "RoutingPolicy",
    "RoutingStore",
    "Status",
    "Sticky",
    "Variant",
    "VariantStats",
]
