"""Routing state that must survive a restart, in sqlite: per model the default version, labels set by
promotions and the rollout; beside it the audit log of every decision (who or which gate, when, why).

One connection, used under a lock from the threads that decide (the management API's worker threads,
the gate evaluator); requests never touch it. Without a file the database lives in memory: the same
code, nothing kept across restarts.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab.core.routing.rollout import RolloutState

__all__ = ["ModelRouting", "RoutingStore"]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS routing (model TEXT PRIMARY KEY, state TEXT NOT NULL, updated_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS audit (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, model TEXT NOT NULL, "
    "event TEXT NOT NULL, detail TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS audit_model ON audit (model, id)",
)


@dataclass
class ModelRouting:
    """The persisted routing of one model (what the API and the rollouts decided, over the policy file)."""

    default: str | None = None
    labels: dict[str, int] = field(default_factory=dict)
    rollout: RolloutState | None = None

    def as_json(self) -> str:
        rollout = self.rollout.as_dict() if self.rollout is not None else None
        return json.dumps({"default": self.default, "labels": self.labels, "rollout": rollout}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ModelRouting:
        data = json.loads(text)
        rollout = RolloutState.from_dict(data["rollout"]) if data.get("rollout") else None
        return cls(data.get("default"), {str(k): int(v) for k, v in data.get("labels", {}).items()}, rollout)


class RoutingStore:
    """sqlite at ``path`` (created with its tables when new), or in memory when ``path`` is None."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path) if path is not None else ":memory:", check_same_thread=False,
                                   isolation_level=None, timeout=30)
        with self._lock:
            if path is not None:
                self._db.execute("PRAGMA journal_mode=WAL")
            for statement in _SCHEMA:
                self._db.execute(statement)

    def load_all(self) -> dict[str, ModelRouting]:
        with self._lock:
            rows = self._db.execute("SELECT model, state FROM routing").fetchall()
        return {model: ModelRouting.from_json(state) for model, state in rows}

    def save(self, model: str, routing: ModelRouting) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO routing (model, state, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT(model) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at",
                (model, routing.as_json(), time.time()),
            )

    def audit(self, model: str, event: str, detail: dict[str, Any]) -> None:
        with self._lock:
            self._db.execute("INSERT INTO audit (at, model, event, detail) VALUES (?, ?, ?, ?)",
                             (time.time(), model, event, json.dumps(detail, sort_keys=True, default=str)))

    def history(self, model: str, limit: int = 50) -> list[dict[str, Any]]:
        """The newest ``limit`` audit entries of ``model``, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT at, event, detail FROM audit WHERE model = ? ORDER BY id DESC LIMIT ?", (model, limit)
            ).fetchall()
        return [{"at": at, "event": event, **json.loads(detail)} for at, event, detail in reversed(rows)]

    def close(self) -> None:
        with self._lock:
            self._db.close()
