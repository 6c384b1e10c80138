"""The routing seam: the only place that turns (model, version or label or nothing) into a loaded version.

:meth:`Router.route` is what every request goes through (the data plane's one infer path, ensemble
steps and python-model BLS calls that re-enter it): explicit versions and labels, then a running
rollout's canary share, then a weighted split, then the default (a label, a version or the newest).
Models with no labels, policy or rollout take a plain path (a dict lookup and ``max``), so routing
costs them nothing. :meth:`Router.resolve` is the same choice without a split, for metadata, config,
readiness and statistics. After a routed request, :meth:`Routed.done` counts it for its variant and
the rollout's gates and may send a shadow copy (:mod:`servelab.core.routing.outcomes`).
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from servelab.backends.parameters import TorchServeHandlerParameters
from servelab.config.settings import RoutingSettings
from servelab.core.records import LoadedVersion
from servelab.core.registry import ModelRegistry
from servelab.core.routing.choice import pick_random, pick_sticky
from servelab.core.routing.outcomes import Outcomes, Routed, VariantStats
from servelab.core.routing.policy import RoutingPolicy, check_label, read_policy
from servelab.core.routing.rollout import CANARY, STABLE, Rollout, Status
from servelab.core.routing.shadow import ShadowPool
from servelab.core.routing.store import ModelRouting, RoutingStore
from servelab.core.routing.table import RouteTable, ShadowPlan, Target, build_table
from servelab.core.routing.windows import Comparison
from servelab.errors import InvalidArgument, NotFound, ServelabError, Unavailable
from servelab.repository import ModelSource
from servelab.repository.tfserving_layout import PARAM_LABELS

__all__ = ["HeaderLookup", "Routed", "Router", "VariantStats"]

log = logging.getLogger("servelab.routing")


class HeaderLookup(Protocol):
    """Request headers (HTTP) or metadata (gRPC), looked up by lower-case name."""

    def get(self, key: str, /) -> str | None: ...



def _explicit(version: str) -> int | str:
    """A version number, or a label (validated), from what a request put where a version goes."""
    if version.isascii() and version.isdigit():
        return int(version)
    try:
        return check_label(version)
    except ValueError:
        raise InvalidArgument(
            f"model version {version!r} is not valid: expected a version number such as '1', a label (a letter, "
            "then letters, digits, '_', '.' or '-'), or none for the default"
        ) from None


class Router:
    """Routes every request of one data plane; owns labels, defaults, splits, shadows and rollouts."""

    def __init__(self, registry: ModelRegistry, settings: RoutingSettings | None = None) -> None:
        self.registry = registry
        self.settings = settings if settings is not None else RoutingSettings()
        self.store = RoutingStore(self.settings.state_db)
        self.shadows = ShadowPool(self.settings.shadow_threads, self.settings.shadow_queue)
        self._lock = threading.RLock()
        self._rng = random.Random()
        #: what is counted and copied once a routed request is answered
        self.outcomes = Outcomes(self._lookup, self.shadows, self._rng)
        self._policies: dict[str, RoutingPolicy | None] = {}
        self._tf_labels: dict[str, dict[str, int]] = {}
        #: the default a model's files name (a TorchServe archive's default version), below any policy or pin
        self._source_defaults: dict[str, int | None] = {}
        self._shadow_plans: dict[str, ShadowPlan] = {}
        self._tables: dict[str, RouteTable] = {}
        self.persisted: dict[str, ModelRouting] = self.store.load_all()
        self.rollouts: dict[str, Rollout] = {
            m: Rollout(p.rollout, self.settings.window_samples) for m, p in self.persisted.items() if p.rollout
        }
        #: called when a rollout becomes active (the control starts its evaluator)
        self.on_active: Callable[[], None] | None = None
        registry.on_load = self.model_loaded
        registry.never_blocks_fn = self.never_blocks
        for model in self.persisted:
            self.rebuild(model)

    # ----- the seam -----
    def route(
        self, name: str, version: str = "", parameters: Mapping[str, Any] | None = None,
        headers: HeaderLookup | None = None,
    ) -> tuple[LoadedVersion, Routed | None]:
        """The version that serves this request, and (for routed models) the decision to report back to."""
        table = self._tables.get(name)
        if table is None:
            return self._plain(name, version), None
        target, variant = self._choose(table, version, parameters, headers)
        lv = self._lookup(target)
        return lv, Routed(self.outcomes, table, variant, lv)

    def resolve(self, name: str, version: str = "") -> LoadedVersion:
        """The version a request naming ``version`` (or none: the default, never a split's pick) means."""
        table = self._tables.get(name)
        if table is None:
            return self._plain(name, version)
        if version:
            return self._lookup(self._explicit_target(table, version)[0])
        rollout = table.rollout
        if rollout is not None:
            return self._lookup(Target(name, rollout.state.stable))
        return self._lookup(table.default_target())

    def labels(self, name: str) -> dict[str, int]:
        """The labels of ``name`` now (NotFound / Unavailable for an unknown or unloaded model)."""
        self.registry.serving(name)
        table = self._tables.get(name)
        return dict(table.labels) if table is not None else {}

    def table(self, name: str) -> RouteTable | None:
        return self._tables.get(name)

    def never_blocks(self, name: str, version: str) -> bool:
        """Whether every version a call to (name, version) may reach runs without blocking (ensembles)."""
        table = self._tables.get(name)
        try:
            if table is None or version:
                return bool(self.resolve(name, version).scheduler.never_blocks)
            targets = [a.target for a in table.arms] or [table.default_target()]
            if table.rollout is not None:
                targets = [Target(name, table.rollout.state.stable), Target(name, table.rollout.state.candidate)]
            return all(self._lookup(t).scheduler.never_blocks for t in targets)
        except ServelabError:
            return False

    # ----- choosing -----
    def _plain(self, name: str, version: str) -> LoadedVersion:
        if not version:  # the hot path of unrouted models: the newest, no allocation
            versions = self.registry.serving(name)
            lv = versions[max(versions)]
            if lv.scheduler.available:
                return lv
            return self._lookup(Target(name))  # raises, saying why
        chosen = _explicit(version)
        if isinstance(chosen, str):
            self.registry.serving(name)  # unknown model first
            raise NotFound(f"model '{name}' has no version label '{chosen}' (it has no labels); name a version "
                           "number or none")
        return self._lookup(Target(name, chosen))

    def _lookup(self, target: Target) -> LoadedVersion:
        versions = self.registry.serving(target.model)
        if target.version is None:
            lv = versions[max(versions)]
        else:
            found = versions.get(target.version)
            if found is None:
                raise NotFound(f"Request for unknown model: '{target.model}' version {target.version} is not found; "
                               f"loaded versions: {sorted(versions)}")
            lv = found
        if not lv.scheduler.available:
            raise Unavailable(f"model '{lv.name}' version {lv.version} is not ready: {lv.scheduler.unavailable_reason()}")
        return lv

    def _explicit_target(self, table: RouteTable, version: str) -> tuple[Target, str]:
        chosen = _explicit(version)
        if isinstance(chosen, int):
            return Target(table.model, chosen), self._side(table, chosen)
        number = table.labels.get(chosen)
        if number is None:
            raise NotFound(f"model '{table.model}' has no version label '{chosen}'; its labels: "
                           f"{sorted(table.labels) or 'none'}")
        return Target(table.model, number), chosen

    @staticmethod
    def _side(table: RouteTable, version: int) -> str:
        rollout = table.rollout
        if rollout is not None and version == rollout.state.stable:
            return STABLE
        if rollout is not None and version == rollout.state.candidate:
            return CANARY
        return f"v{version}"

    def _choose(self, table: RouteTable, version: str, parameters: Mapping[str, Any] | None,
                headers: HeaderLookup | None) -> tuple[Target, str]:
        if version:
            return self._explicit_target(table, version)
        rollout = table.rollout
        if rollout is not None:
            share = rollout.share
            key = self._key(table, parameters, headers) if 0 < share < 1 else None
            if key is not None:
                canary = pick_sticky((STABLE, CANARY), (1 - share, share), key) == 1
            else:
                canary = share >= 1 or (share > 0 and self._rng.random() < share)
            state = rollout.state
            return (Target(table.model, state.candidate), CANARY) if canary else (Target(table.model, state.stable), STABLE)
        if table.arms:
            key = self._key(table, parameters, headers)
            i = pick_sticky(table.arm_names, table.weights, key) if key is not None else pick_random(table.cumulative, self._rng)
            return table.arms[i].target, table.arms[i].name
        return table.default_target(), "default"

    @staticmethod
    def _key(table: RouteTable, parameters: Mapping[str, Any] | None, headers: HeaderLookup | None) -> str | None:
        sticky = table.sticky
        if table.rollout is not None and table.rollout.state.spec.sticky is not None:
            sticky = table.rollout.state.spec.sticky
        if sticky is None:
            return None
        if sticky.parameter and parameters:
            value = parameters.get(sticky.parameter)
            if value is not None:
                return str(value)
        header = sticky.lowered()
        return headers.get(header) if header and headers is not None else None

    # ----- what routing did: variant counts, split shares, comparisons -----
    def variant_stats(self) -> list[VariantStats]:
        return self.outcomes.variant_stats()

    def shares(self) -> list[tuple[str, str, float]]:
        """(model, variant, share of unversioned requests it should get) for every split and rollout."""
        out: list[tuple[str, str, float]] = []
        for name, table in sorted(self._tables.items()):
            if table.rollout is not None:
                share = table.rollout.share
                out += [(name, STABLE, 1.0 - share), (name, CANARY, share)]
            elif table.arms:
                total = table.cumulative[-1]
                out += [(name, arm.name, arm.weight / total) for arm in table.arms]
        return out

    def comparisons(self) -> list[tuple[str, Comparison]]:
        """(model, comparison) of every policy shadow and every rollout step measuring agreement."""
        out = [(m, p.comparison) for m, p in self._shadow_plans.items()]
        out += [(m, r.comparison) for m, r in self.rollouts.items() if r.comparison is not None and r.state.status.active]
        return out

    # ----- changes: loads, the API, decisions -----
    def model_loaded(self, name: str, source: ModelSource) -> Callable[[], None]:
        """Registry hook, before the new versions serve: read and check the policy file and TF Serving's
        labels (InvalidArgument fails the load); returns what to run once they serve."""
        policy = read_policy(source.directory, name) if source.directory is not None else None
        tf_labels = self._tf_labels_of(source)
        source_default = self._source_default_of(source)
        served = sorted(source.versions)
        named = {f"TF Serving version_labels.{k}": v for k, v in tf_labels.items()}
        named.update(policy.versions_named() if policy is not None else {})
        missing = {where: v for where, v in named.items() if v not in source.versions}
        if missing:
            raise InvalidArgument(f"model '{name}': the routing policy names versions that are not served: "
                                  f"{missing}; served versions: {served}")

        def commit() -> None:
            with self._lock:
                self._policies[name], self._tf_labels[name] = policy, tf_labels
                self._source_defaults[name] = source_default if source_default in source.versions else None
                self._set_shadow_plan(name, policy)
                self._check_rollout_versions(name, set(source.versions))
                self.rebuild(name)

        return commit

    @staticmethod
    def _tf_labels_of(source: ModelSource) -> dict[str, int]:
        params = source.config.parameters
        if PARAM_LABELS not in params:
            return {}
        return {str(k): int(v) for k, v in json.loads(params[PARAM_LABELS].string_value or "{}").items()}

    @staticmethod
    def _source_default_of(source: ModelSource) -> int | None:
        """A TorchServe archive's default version (its store's), as a servelab version number."""
        params = source.config.parameters
        if "torchserve_default_version" not in params:
            return None
        ts = TorchServeHandlerParameters.read(source.config)
        number = ts.servelab_version("")
        return int(number) if number.isdigit() else None

    def _set_shadow_plan(self, name: str, policy: RoutingPolicy | None) -> None:
        shadow = policy.shadow if policy is not None else None
        old = self._shadow_plans.get(name)
        if shadow is None:
            self._shadow_plans.pop(name, None)
        elif old is None or old.target.version != shadow.version or old.sample != shadow.sample:
            comparison = Comparison("primary", f"v{shadow.version}", self.settings.window_samples)
            self._shadow_plans[name] = ShadowPlan(Target(name, shadow.version), shadow.sample, comparison)

    def _check_rollout_versions(self, name: str, served: set[int]) -> None:
        rollout = self.rollouts.get(name)
        if rollout is None or not rollout.state.status.active:
            return
        gone = [v for v in (rollout.state.stable, rollout.state.candidate) if v not in served]
        if gone:
            rollout.finish(Status.ROLLED_BACK, f"version(s) {gone} are no longer served after a reload")
            self.commit(name, "rolled_back", {"reason": rollout.state.reason, "step": rollout.state.step})

    def routing_of(self, name: str) -> ModelRouting:
        with self._lock:
            return self.persisted.setdefault(name, ModelRouting())

    def commit(self, name: str, event: str, detail: dict[str, Any]) -> None:
        """Persist ``name``'s routing, log the decision and swap in its new table."""
        with self._lock:
            routing = self.persisted.setdefault(name, ModelRouting())
            rollout = self.rollouts.get(name)
            routing.rollout = rollout.state if rollout is not None else None
            self.store.save(name, routing)
            self.store.audit(name, event, detail)
            self.rebuild(name)
        log.info("routing of %s: %s %s", name, event, detail)
        if rollout is not None and rollout.state.status.active and self.on_active is not None:
            self.on_active()

    def rebuild(self, name: str) -> None:
        with self._lock:
            table = build_table(name, self._tf_labels.get(name, {}), self._policies.get(name),
                                self.persisted.get(name), self.rollouts.get(name), self._shadow_plans.get(name),
                                self._source_defaults.get(name))
            if table is None:
                self._tables.pop(name, None)
            else:
                self._tables[name] = table

    def close(self) -> None:
        self.shadows.close()
        self.store.close()
