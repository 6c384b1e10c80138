"""Version routing (core/routing): where rollout state persists, gate evaluation, the shadow budget."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

__all__ = ["RoutingSettings"]


class RoutingSettings(BaseModel):
    """Version routing (core/routing): where rollout state persists, how gates are evaluated, the shadow budget."""

    state_db: Path | None = Field(
        None, description="sqlite file holding rollouts, default versions, labels set by promotions and the audit "
        "log, so that a restart resumes a rollout at the step it was at; unset = kept in memory (lost at restart).",
    )
    evaluate_every_s: float = Field(1.0, gt=0, description="How often the gates of running rollouts are evaluated.")
    shadow_threads: int = Field(
        2, ge=1, le=64, description="Shadow copies run at once: drainer tasks on the event loop that take one "
        "copy per loop turn after the ready requests (threads, for copies of in-process API calls)."
    )
    shadow_queue: int = Field(
        64, ge=1, description="Shadow copies waiting or running at once; past it new copies are shed (counted), the "
        "primary request is never delayed.",
    )
    window_samples: int = Field(
        20000, ge=100, description="Latency samples kept per variant and rollout step for the P99 gate (the newest)."
    )
