"""What the registry holds per model: its state, and each loaded version with everything a request needs.

The data plane and the router read these records (the signature to validate against, the scheduler to
run on, the statistics to count into); only the registry writes them. A version's :meth:`LoadedVersion.close`
drains its requests before its instances unload.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum

from servelab.backends.base import Backend
from servelab.core.scheduling import Scheduler
from servelab.core.stats import ModelStats
from servelab.core.validation import Signature
from servelab.core.workers import WorkerInstance
from servelab.protocol import model_config_pb2 as mc

__all__ = ["LoadedVersion", "ModelRecord", "ModelState"]

log = logging.getLogger("servelab.registry")


class ModelState(str, Enum):
    LOADING = "LOADING"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    UNLOADING = "UNLOADING"


@dataclass
class LoadedVersion:
    name: str
    version: int
    config: mc.ModelConfig
    signature: Signature
    instances: list[Backend]
    scheduler: Scheduler
    stats: ModelStats
    #: output name -> labels (``label_filename``), read when this version loaded
    labels: dict[str, list[str]] = field(default_factory=dict)

    def close(self, drain_timeout_s: float, stop_grace_s: float = 5.0) -> None:
        """Drain, then unload every instance; a worker still busy after ``stop_grace_s`` is killed."""
        if not self.scheduler.drain(drain_timeout_s):
            log.warning("model %s v%d unloaded with requests still in flight", self.name, self.version)
        self.scheduler.close()
        for backend in self.instances:
            try:
                if isinstance(backend, WorkerInstance):
                    backend.close(stop_grace_s)
                else:
                    backend.unload()
            except Exception:  # unloading must never take the server down
                log.exception("unloading %s v%d failed", self.name, self.version)


@dataclass
class ModelRecord:
    name: str
    state: ModelState = ModelState.UNAVAILABLE
    reason: str = ""
    versions: dict[int, LoadedVersion] = field(default_factory=dict)
    fingerprint: str = ""
    backend: str = ""
    config: mc.ModelConfig | None = None
