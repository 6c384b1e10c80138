"""Ensemble backend: Triton's ``ensemble_scheduling``, a DAG of calls to other models.

Each step maps ensemble tensors to its model's inputs (``input_map {key: model input, value:
ensemble tensor}``) and its model's outputs back to ensemble tensors (``output_map``). The graph is
checked at load (every step input is produced earlier or is an ensemble input, every ensemble output
is produced, each tensor has one producer, no cycles) and steps run one after another in dependency
order through ``ctx.infer``. It declares ``never_blocks`` (may run on the event loop) only when every
step's model does, as the registry reported at load (``ctx.calls_never_block``). An ensemble input marked ``optional: true`` that a request leaves out is
left out of every step that maps it (that step's model must declare the input optional too), as
Triton does. Cumulative time per step is kept in :attr:`EnsembleBackend.step_ns`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from servelab.backends.base import Backend, BackendContext, InferFn, Inputs, Outputs
from servelab.errors import InternalError, InvalidArgument
from servelab.protocol import model_config_pb2 as mc

__all__ = ["EnsembleBackend", "Step", "plan_steps"]


@dataclass(frozen=True, slots=True)
class Step:
    """One validated step: the model to call and how tensors flow in and out."""

    index: int
    model_name: str
    version: str
    input_map: tuple[tuple[str, str], ...]  # (model input, ensemble tensor)
    output_map: tuple[tuple[str, str], ...]  # (model output, ensemble tensor)

    @property
    def label(self) -> str:
        return f"step {self.index} ('{self.model_name}')"


def _steps(config: mc.ModelConfig) -> list[Step]:
    steps = []
    for i, s in enumerate(config.ensemble_scheduling.step):
        if not s.model_name:
            raise InvalidArgument(f"ensemble '{config.name}': step {i} has no model_name")
        version = "" if s.model_version < 0 else str(s.model_version)
        steps.append(
            Step(
                i,
                s.model_name,
                version,
                tuple(sorted(s.input_map.items())),
                tuple(sorted(s.output_map.items())),
            )
        )
    return steps


def plan_steps(config: mc.ModelConfig) -> list[Step]:
    """The steps in an order where every input exists before it is used; InvalidArgument otherwise."""
    name = config.name
    steps = _steps(config)
    if not steps:
        raise InvalidArgument(f"ensemble '{name}' has no ensemble_scheduling steps")
    ensemble_inputs = {t.name for t in config.input}
    producer: dict[str, Step] = {}
    for step in steps:
        for _, tensor in step.output_map:
            if tensor in ensemble_inputs:
                raise InvalidArgument(
                    f"ensemble '{name}': {step.label} writes '{tensor}', which is an ensemble input"
                )
            if tensor in producer:
                raise InvalidArgument(
                    f"ensemble '{name}': tensor '{tensor}' is produced by both {producer[tensor].label} and {step.label}"
                )
            producer[tensor] = step
    for step in steps:
        for model_input, tensor in step.input_map:
            if tensor not in ensemble_inputs and tensor not in producer:
                raise InvalidArgument(
                    f"ensemble '{name}': {step.label} input '{model_input}' reads tensor '{tensor}', which is "
                    f"neither an ensemble input {sorted(ensemble_inputs)} nor produced by any step"
                )
    for output in config.output:
        if output.name not in producer:
            raise InvalidArgument(f"ensemble '{name}': output '{output.name}' is not produced by any step")
    return _topological(name, steps, ensemble_inputs)


def _topological(name: str, steps: list[Step], available: set[str]) -> list[Step]:
    ready = set(available)
    pending = list(steps)
    order: list[Step] = []
    while pending:
        runnable = [s for s in pending if all(t in ready for _, t in s.input_map)]
        if not runnable:
            stuck = ", ".join(
                f"{s.label} waits for {sorted(t for _, t in s.input_map if t not in ready)}" for s in pending
            )
            raise InvalidArgument(f"ensemble '{name}' has a cycle: {stuck}")
        for step in runnable:
            order.append(step)
            pending.remove(step)
            ready.update(t for _, t in step.output_map)
    return order


class EnsembleBackend(Backend):
    """Runs an ensemble's steps in dependency order through the server's ``ctx.infer``."""

    kind: ClassVar[str] = "ensemble"
    platforms: ClassVar[tuple[str, ...]] = ("ensemble",)

    def __init__(self, ctx: BackendContext) -> None:
        super().__init__(ctx)
        self.steps: list[Step] = []
        #: Cumulative nanoseconds and calls per step index.
        self.step_ns: dict[int, int] = {}
        self.step_calls: dict[int, int] = {}
        self._lock = threading.Lock()
        self._call: InferFn | None = None
        self._outputs: tuple[str, ...] = ()

    def load(self) -> None:
        if self.ctx.infer is None:
            raise InvalidArgument(
                f"ensemble '{self.ctx.model_name}' needs the server's infer function (ctx.infer)"
            )
        self._call = self.ctx.infer
        self.steps = plan_steps(self.config)
        never_blocks = self.ctx.calls_never_block
        self.never_blocks = never_blocks is not None and all(
            never_blocks(s.model_name, s.version) for s in self.steps
        )
        self._outputs = tuple(t.name for t in self.config.output)
        self.step_ns = {s.index: 0 for s in self.steps}
        self.step_calls = {s.index: 0 for s in self.steps}

    def infer(self, inputs: Inputs) -> Outputs:
        assert self._call is not None, "load() first"
        tensors = dict(inputs)
        for step in self.steps:
            # Only absent optional ensemble inputs can be missing: the plan guarantees the rest.
            feed = {
                model_input: tensors[tensor] for model_input, tensor in step.input_map if tensor in tensors
            }
            start = time.perf_counter_ns()
            result = self._call(step.model_name, step.version, feed)
            elapsed = time.perf_counter_ns() - start
            with self._lock:
                self.step_ns[step.index] += elapsed
                self.step_calls[step.index] += 1
            for model_output, tensor in step.output_map:
                if model_output not in result:
                    raise InternalError(
                        f"ensemble '{self.ctx.model_name}': {step.label} returned {sorted(result)}, "
                        f"not the output '{model_output}' its output_map names"
                    )
                tensors[tensor] = result[model_output]
        return {name: tensors[name] for name in self._outputs}

    def stage_stats(self) -> dict[str, Any]:
        return {"steps": self.step_timings()}

    def step_timings(self) -> list[dict[str, object]]:
        """Per step: model, calls and cumulative nanoseconds, in run order."""
        with self._lock:
            return [
                {
                    "step": s.index,
                    "model_name": s.model_name,
                    "calls": self.step_calls[s.index],
                    "total_ns": self.step_ns[s.index],
                }
                for s in self.steps
            ]
