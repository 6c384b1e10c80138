"""What a model's routing may say: the policy file beside config.pbtxt, and a rollout's specification.

``routing.yaml`` (or ``routing.json``: YAML reads JSON too) in the model's folder::

    default: stable                 # label or version for requests that name none (else the newest)
    labels: {stable: 1, canary: 2}  # names usable wherever a version number goes
    sticky: {header: x-user-id}     # or {parameter: user}: one key stays on one variant
    split:                          # weighted split of the requests that name no version
      - {version: 1, weight: 80}
      - {version: 2, weight: 20, name: b}   # or {model: other_model, weight: 20}
    shadow: {version: 2, sample: 0.5}       # copy live requests of the default target to version 2

A rollout (:class:`RolloutSpec`) comes through the management API or ``servelab rollout start``.
Both are pydantic models: one schema, read by the file reader, the REST and gRPC control and the CLI.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from servelab.errors import InvalidArgument
from servelab.trust import resolve_inside

__all__ = [
    "POLICY_FILES",
    "Gates",
    "RolloutSpec",
    "RoutingPolicy",
    "ShadowPolicy",
    "Sticky",
    "Variant",
    "check_label",
    "read_policy",
    "validation_message",
]

#: file names the router reads in a model's folder (at most one may exist)
POLICY_FILES = ("routing.yaml", "routing.json")
_LABEL = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


def check_label(label: str, field: str = "label") -> str:
    """A label starts with a letter (so it can never read as a version number); letters, digits, _ . -."""
    if not isinstance(label, str) or not _LABEL.match(label):
        raise ValueError(f"{field} {label!r} must start with a letter and hold only letters, digits, '_', '.' or '-'")
    return label


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Sticky(_Strict):
    """Where a request's stickiness key is: a request parameter (checked first) and/or a header."""

    parameter: str | None = Field(None, min_length=1, description="OIP request parameter holding the key.")
    header: str | None = Field(None, min_length=1, description="HTTP header (gRPC metadata) holding the key.")

    @model_validator(mode="after")
    def _one_source(self) -> Sticky:
        if self.parameter is None and self.header is None:
            raise ValueError("sticky needs 'parameter' or 'header' (or both): where the request key is")
        return self

    def lowered(self) -> str | None:
        return self.header.lower() if self.header else None


class Variant(_Strict):
    """One arm of a weighted split: a version of this model or of another model."""

    model: str | None = Field(None, description="Another model to send this share to (default: this model).")
    version: int | None = Field(None, ge=1, description="Version (default: that model's newest).")
    weight: float = Field(ge=0, description="Relative weight; shares are weight / sum of weights.")
    name: str | None = Field(None, description="Variant name in metrics and status (default from model/version).")

    def label(self, own_model: str) -> str:
        if self.name:
            return self.name
        model = "" if self.model in (None, own_model) else f"{self.model}:"
        return f"{model}v{self.version}" if self.version is not None else f"{model}newest"


class ShadowPolicy(_Strict):
    """Copy live requests of the default target to a candidate; the client gets the primary's answer."""

    version: int = Field(ge=1, description="Candidate version that receives the copies.")
    sample: float = Field(1.0, gt=0, le=1, description="Share of the live requests copied.")


class RoutingPolicy(_Strict):
    """The policy file of one model."""

    default: str | None = Field(None, description="Label or version number of requests that name no version.")
    labels: dict[str, int] = Field(default_factory=dict, description="Label -> version.")
    sticky: Sticky | None = Field(None, description="Request key for sticky assignment (splits and canaries).")
    split: list[Variant] | None = Field(None, min_length=1, description="Weighted split of unversioned requests.")
    shadow: ShadowPolicy | None = Field(None, description="Shadow copies to a candidate version.")

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, int]) -> dict[str, int]:
        for label, version in labels.items():
            check_label(label)
            if version < 1:
                raise ValueError(f"label {label!r} points at version {version}; expected a version >= 1")
        return labels

    @field_validator("split")
    @classmethod
    def _weights(cls, split: list[Variant] | None) -> list[Variant] | None:
        if split is not None and sum(v.weight for v in split) <= 0:
            raise ValueError("split: the weights sum to 0; give at least one variant a positive weight")
        return split

    def versions_named(self) -> dict[str, int]:
        """Every own-model version the policy names, by where it names it (checked against what loaded)."""
        named = {f"labels.{k}": v for k, v in self.labels.items()}
        if self.default and self.default.isdigit():
            named["default"] = int(self.default)
        for i, variant in enumerate(self.split or []):
            if variant.model is None and variant.version is not None:
                named[f"split[{i}].version"] = variant.version
        if self.shadow is not None:
            named["shadow.version"] = self.shadow.version
        return named


class Gates(_Strict):
    """What every step of a staged canary must show before it goes on; a failure rolls back (error rate and
    agreement at once; P99, over the same span as stable, when the step ends or once over twice its bound)."""

    max_error_rate_increase: float = Field(
        0.01, ge=0, le=1, description="Candidate error rate at most the stable's plus this (server errors only).")
    p99_max_increase: float = Field(0.05, ge=0, description="Candidate P99 at most the stable's x (1 + this).")
    p99_slack_ms: float = Field(0.0, ge=0, description="Absolute slack added to the P99 bound (noise of tiny models).")
    max_abs_diff: float = Field(
        1e-5, ge=0, description="Output agreement: largest |candidate - stable| over compared requests.")
    min_top1_agreement: float | None = Field(
        None, gt=0, le=1, description="Output agreement by top-1 instead: share of rows whose argmax agrees.")
    min_samples: int = Field(50, ge=1, description="Samples each side of a gate needs before it may decide.")


class RolloutSpec(_Strict):
    """A staged canary of ``candidate`` against ``stable`` (optionally after a shadow step)."""

    candidate: str = Field(min_length=1, description="Candidate version number or label.")
    stable: str | None = Field(None, description="Stable version or label (default: today's default target).")
    steps: list[float] = Field(default_factory=lambda: [5.0, 20.0, 100.0], min_length=1,
                               description="Candidate traffic percent per step, increasing, ending at 100.")
    shadow: bool = Field(False, description="Begin with a shadow step: 0% live, copies of stable's requests compared.")
    min_dwell_s: float = Field(60.0, ge=0, description="Least time at each step.")
    min_requests: int = Field(100, ge=0, description="Least candidate requests (shadow step: compared copies) per step.")
    shadow_sample: float = Field(1.0, gt=0, le=1, description="Share of stable requests copied in the shadow step.")
    agreement_sample: float = Field(
        0.1, ge=0, le=1, description="Share of canary requests also sent to stable to measure output agreement.")
    auto: bool = Field(True, description="Advance when the gates pass; False: each step waits for `promote`.")
    sticky: Sticky | None = Field(None, description="Request key that keeps a user on one side (default: the policy's).")
    gates: Gates = Field(default_factory=Gates)

    @field_validator("steps")
    @classmethod
    def _steps(cls, steps: list[float]) -> list[float]:
        if any(not 0 < s <= 100 for s in steps):
            raise ValueError(f"steps {steps}: each is a percent in (0, 100]")
        if any(b <= a for a, b in itertools.pairwise(steps)):
            raise ValueError(f"steps {steps} must increase")
        if steps[-1] != 100:
            raise ValueError(f"steps {steps} must end at 100 (the candidate takes all traffic before promotion)")
        return steps

    def percents(self) -> list[float]:
        """Candidate traffic per step, the shadow step (0) first when asked for."""
        return ([0.0] if self.shadow else []) + list(self.steps)


def validation_message(exc: ValidationError, what: str) -> str:
    """One line per problem: where (dotted) and what is wrong."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "(top level)"
        parts.append(f"{where}: {error['msg']}")
    return f"{what}: " + "; ".join(parts)


def read_policy(folder: Path, model: str) -> RoutingPolicy | None:
    """The policy file in ``folder`` (None when there is none); InvalidArgument naming the file otherwise."""
    found = [n for n in POLICY_FILES if resolve_inside(folder, n, "routing policy").is_file()]
    if not found:
        return None
    if len(found) > 1:
        raise InvalidArgument(f"model '{model}' has both {found[0]} and {found[1]}: keep one routing policy file")
    path = resolve_inside(folder, found[0], "routing policy")
    try:
        data: Any = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidArgument(f"model '{model}': {found[0]} does not parse: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidArgument(f"model '{model}': {found[0]} must be a mapping; got {type(data).__name__}")
    try:
        return RoutingPolicy.model_validate(data)
    except ValidationError as exc:
        raise InvalidArgument(validation_message(exc, f"model '{model}': {found[0]}")) from None
