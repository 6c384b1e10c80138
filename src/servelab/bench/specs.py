"""What to measure: the target, the load, the inputs (picklable, validated on construction)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from servelab.errors import InvalidArgument

__all__ = ["TARGET_KINDS", "InputSpec", "LoadSpec", "TargetKind", "TargetSpec"]

TargetKind = Literal["oip-http", "oip-grpc", "torchserve", "tfserving", "inprocess"]
TARGET_KINDS: tuple[str, ...] = ("oip-http", "oip-grpc", "torchserve", "tfserving", "inprocess")


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """Where requests go. ``url`` is ``http://host:port`` (HTTP), ``host:port`` (gRPC) or a model file."""

    kind: TargetKind
    url: str
    binary: bool = True
    server_pid: int | None = None
    timeout_s: float = 30.0
    model_version: str = ""

    def __post_init__(self) -> None:
        if self.kind not in TARGET_KINDS:
            raise InvalidArgument(f"unknown target kind {self.kind!r}; expected one of {list(TARGET_KINDS)}")
        if not self.url:
            raise InvalidArgument("target url is empty; expected http://host:port, host:port or a model path")
        if self.timeout_s <= 0:
            raise InvalidArgument(f"timeout_s must be > 0, got {self.timeout_s}")

    @property
    def is_http(self) -> bool:
        return self.kind in ("oip-http", "torchserve", "tfserving")

    def http_base(self) -> str:
        url = self.url.rstrip("/")
        return url if url.startswith(("http://", "https://")) else f"http://{url}"

    def grpc_address(self) -> str:
        return self.url.split("://", 1)[-1].rstrip("/")


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """How much load, for how long, and when a measurement counts as stable."""

    mode: Literal["concurrency", "request_rate"] = "concurrency"
    levels: tuple[float, ...] = (1,)
    arrivals: Literal["constant", "poisson"] = "constant"
    measurement_interval_ms: int = 2000
    window_requests: int | None = None
    request_count: int | None = None
    stability_percentage: float = 10.0
    max_windows: int = 10
    warmup_requests: int = 10
    workers: int = 1
    max_inflight: int = 512
    max_level_s: float = 120.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in ("concurrency", "request_rate"):
            raise InvalidArgument(f"load mode must be 'concurrency' or 'request_rate', got {self.mode!r}")
        if not self.levels or any(x <= 0 for x in self.levels):
            raise InvalidArgument(
                f"load levels must be a non-empty list of positive numbers, got {self.levels}"
            )
        if self.mode == "concurrency" and any(int(x) != x for x in self.levels):
            raise InvalidArgument(f"concurrency levels must be whole numbers, got {self.levels}")
        if self.arrivals not in ("constant", "poisson"):
            raise InvalidArgument(f"arrivals must be 'constant' or 'poisson', got {self.arrivals!r}")
        if self.measurement_interval_ms < 10:
            raise InvalidArgument(
                f"measurement_interval_ms must be >= 10, got {self.measurement_interval_ms}"
            )
        for name in ("window_requests", "request_count"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InvalidArgument(f"{name} must be >= 1 when given, got {value}")
        if self.stability_percentage <= 0:
            raise InvalidArgument(f"stability_percentage must be > 0, got {self.stability_percentage}")
        if self.max_windows < 3:
            raise InvalidArgument(
                f"max_windows must be >= 3 (stability compares 3 windows), got {self.max_windows}"
            )
        if self.warmup_requests < 0 or self.workers < 1 or self.max_inflight < 1 or self.max_level_s <= 0:
            raise InvalidArgument(
                "warmup_requests must be >= 0, workers >= 1, max_inflight >= 1 and max_level_s > 0; got "
                f"{self.warmup_requests}, {self.workers}, {self.max_inflight}, {self.max_level_s}"
            )


@dataclass(frozen=True, slots=True)
class InputSpec:
    """Where request tensors come from; ``shapes`` resolves ``-1`` dims (item shape, no batch dim)."""

    data_path: str | None = None
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    batch_size: int = 1
    fill: Literal["random", "zero"] = "random"
    distinct_requests: int = 16
    seed: int = 0

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise InvalidArgument(f"batch_size must be >= 1, got {self.batch_size}")
        if self.fill not in ("random", "zero"):
            raise InvalidArgument(f"fill must be 'random' or 'zero', got {self.fill!r}")
        if self.distinct_requests < 1:
            raise InvalidArgument(f"distinct_requests must be >= 1, got {self.distinct_requests}")
        for name, dims in self.shapes.items():
            if any(d < 1 for d in dims):
                raise InvalidArgument(f"shape for input {name!r} must have dims >= 1, got {list(dims)}")
