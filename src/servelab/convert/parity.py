"""The accuracy gate: an artefact's outputs against the source's on the same inputs, and a verdict.

Per output: the largest absolute error, the relative error (largest absolute error over the largest
reference magnitude, so values near zero do not blow it up), and for classifiers the share of rows
whose top-1 class agrees. An artefact passes when every float output is finite and within the
precision's tolerance (classifiers: top-1 agreement at least the precision's floor, integer outputs
such as labels: equal on that same share of rows).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from servelab.errors import InvalidArgument

__all__ = ["DEFAULT_TOLERANCES", "OutputParity", "Parity", "Tolerance", "compare_outputs", "parse_tolerances"]


@dataclass(frozen=True, slots=True)
class Tolerance:
    """Largest relative error allowed, and the top-1 agreement floor for classifiers."""

    max_rel_error: float
    min_top1: float


DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(1e-3, 0.99),
    "fp16": Tolerance(2e-2, 0.97),
    "int8": Tolerance(0.1, 0.90),
    "int8-static": Tolerance(0.1, 0.90),
}


def parse_tolerances(items: list[str]) -> dict[str, Tolerance]:
    """``PRECISION=REL`` or ``PRECISION=REL/TOP1`` options over the defaults."""
    out = dict(DEFAULT_TOLERANCES)
    for item in items:
        precision, sep, value = item.partition("=")
        rel, _, top1 = value.partition("/")
        try:
            base = out.get(precision, DEFAULT_TOLERANCES["fp32"])
            out[precision] = Tolerance(float(rel), float(top1) if top1 else base.min_top1)
        except ValueError:
            raise InvalidArgument(f"--tolerance {item!r}: expected PRECISION=REL or PRECISION=REL/TOP1") from None
        if not sep or precision not in DEFAULT_TOLERANCES:
            raise InvalidArgument(f"--tolerance {item!r}: precision must be one of {sorted(DEFAULT_TOLERANCES)}")
    return out


@dataclass
class OutputParity:
    name: str
    max_abs_error: float
    max_rel_error: float
    mean_abs_error: float
    finite: bool
    top1_agreement: float | None = None
    exact_agreement: float | None = None


@dataclass
class Parity:
    """The figures of every output and the gate's verdict."""

    samples: int
    tolerance: Tolerance
    outputs: list[OutputParity] = field(default_factory=list)
    passed: bool = True
    reasons: list[str] = field(default_factory=list)

    @property
    def accuracy_drop(self) -> float:
        """One number for ``select --max-accuracy-drop``: 1 - top-1 agreement for classifiers, else the
        largest relative error."""
        top1 = [o.top1_agreement for o in self.outputs if o.top1_agreement is not None]
        exact = [o.exact_agreement for o in self.outputs if o.exact_agreement is not None]
        if top1 or exact:
            return 1.0 - min(top1 + exact)
        return max((o.max_rel_error for o in self.outputs), default=0.0)

    def summary(self) -> str:
        parts = []
        for o in self.outputs:
            text = f"{o.name}: max abs {o.max_abs_error:.3g}, rel {o.max_rel_error:.3g}"
            if o.top1_agreement is not None:
                text += f", top-1 {o.top1_agreement:.1%}"
            if o.exact_agreement is not None:
                text += f", equal {o.exact_agreement:.1%}"
            parts.append(text)
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "tolerance": asdict(self.tolerance),
            "passed": self.passed,
            "reasons": self.reasons,
            "accuracy_drop": self.accuracy_drop,
            "outputs": [asdict(o) for o in self.outputs],
        }


def _float_parity(name: str, ref: np.ndarray, got: np.ndarray, classifier: bool) -> OutputParity:
    ref64 = ref.astype(np.float64)
    got64 = got.astype(np.float64)
    finite = bool(np.isfinite(got64).all())
    diff = np.abs(np.nan_to_num(got64, nan=np.inf) - ref64)
    scale = float(np.max(np.abs(ref64))) if ref64.size else 0.0
    max_abs = float(diff.max()) if diff.size else 0.0
    rel = max_abs / scale if scale > 0 else max_abs
    top1 = None
    if classifier and ref.ndim == 2 and ref.shape[1] >= 2:
        top1 = float(np.mean(np.argmax(ref64, axis=1) == np.argmax(np.nan_to_num(got64), axis=1)))
    return OutputParity(name, max_abs, rel, float(diff.mean()) if diff.size else 0.0, finite, top1)


def compare_outputs(
    names: list[str],
    reference: list[np.ndarray],
    produced: dict[str, np.ndarray],
    tolerance: Tolerance,
    classifier: bool,
) -> Parity:
    """Compare ``produced`` (by output name) with ``reference`` (in ``names`` order) and decide."""
    samples = len(reference[0]) if reference and reference[0].ndim else 1
    parity = Parity(samples, tolerance)
    for name, ref in zip(names, reference, strict=True):
        if name not in produced:
            parity.passed = False
            parity.reasons.append(f"output {name!r} is missing (artefact gave {sorted(produced)})")
            continue
        got = np.asarray(produced[name])
        if got.size != ref.size:
            parity.passed = False
            parity.reasons.append(f"output {name!r} has shape {list(got.shape)}, the source {list(ref.shape)}")
            continue
        got = got.reshape(ref.shape)
        if ref.dtype.kind in "iub":
            agree = float(np.mean(got == ref))
            parity.outputs.append(OutputParity(name, float(np.max(np.abs(got.astype(np.int64) - ref.astype(np.int64)), initial=0)), 0.0, 0.0, True, exact_agreement=agree))
            if agree < tolerance.min_top1:
                parity.passed = False
                parity.reasons.append(f"output {name!r} equals the source on {agree:.1%} of rows, below {tolerance.min_top1:.0%}")
            continue
        out = _float_parity(name, ref, got, classifier)
        parity.outputs.append(out)
        _judge(parity, out, tolerance, classifier)
    return parity


def _judge(parity: Parity, out: OutputParity, tolerance: Tolerance, classifier: bool) -> None:
    if not out.finite:
        parity.passed = False
        parity.reasons.append(
            f"output {out.name!r} has inf/nan values: the model's values overflow this precision"
        )
    elif out.top1_agreement is not None:
        if out.top1_agreement < tolerance.min_top1:
            parity.passed = False
            parity.reasons.append(
                f"output {out.name!r}: top-1 agrees on {out.top1_agreement:.1%} of rows, "
                f"below {tolerance.min_top1:.0%}"
            )
    elif out.max_rel_error > tolerance.max_rel_error:
        parity.passed = False
        parity.reasons.append(
            f"output {out.name!r}: relative error {out.max_rel_error:.3g} (max abs {out.max_abs_error:.3g}) "
            f"exceeds {tolerance.max_rel_error:g}"
        )
    if classifier and out.top1_agreement is None and out.max_rel_error > tolerance.max_rel_error * 10:
        parity.passed = False
        parity.reasons.append(f"output {out.name!r}: relative error {out.max_rel_error:.3g} is far past the tolerance")
