"""Worker processes: deadlines, restart back-off, caps and shared-memory arenas."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

__all__ = ["WorkerSettings"]


class WorkerSettings(BaseModel):
    """Worker processes (python models, and any model with ``instance_mode: process``)."""

    kill_timeout_s: float = Field(
        10.0, ge=0, description="How long past the request deadline a worker still busy with it lives "
        "before it is killed and replaced."
    )
    restart_backoff_s: float = Field(0.25, gt=0, description="Delay before restarting a worker that died; doubles per failure.")
    restart_backoff_max_s: float = Field(30.0, gt=0, description="Longest delay between restarts of a failing worker.")
    start_timeout_s: float = Field(120.0, gt=0, description="Time a worker may take to start and load its model.")
    max_workers_per_model: int = Field(
        8, ge=1, description="Most worker processes one model version may have (instance_group count, TorchServe scale)."
    )
    spin_us: int = Field(
        200, ge=0, le=10_000,
        description="A request the event loop sends to an idle worker, with nothing else waiting on the loop, is "
        "awaited by polling the worker's socket for up to this long (and up to twice the worker's typical answer "
        "time) instead of sleeping: neither side then pays a wake-up. 0 turns it off.",
    )
    worker_spin_us: int = Field(
        800, ge=0, le=10_000,
        description="A worker that answered a request sent while the server's event loop looked idle polls its "
        "socket for the next request for up to this long, while the gaps between requests stay shorter, few "
        "requests find it busy and no thread on the machine waits for a CPU, instead of sleeping: the next "
        "request then starts without the worker's wake-up. gRPC calls never ask for it. 0 turns it off.",
    )
    arena_bytes: int = Field(
        8 * 1024 * 1024, ge=1024 * 1024,
        description="Shared memory pre-allocated per worker and direction for tensors (grows when a request needs more).",
    )

    @model_validator(mode="after")
    def _backoff_order(self) -> WorkerSettings:
        if self.restart_backoff_max_s < self.restart_backoff_s:
            raise ValueError(
                f"restart_backoff_max_s ({self.restart_backoff_max_s}) must be >= restart_backoff_s ({self.restart_backoff_s})"
            )
        return self
