"""grpcio start-up settings that must be in the environment before ``import grpc``.

grpcio 1.8x routes every socket read and write through its EventEngine thread pool, one thread hop
each way. Measured on the 2-core host with a do-nothing unary call (``ServerLive``) between two
processes, P50 (benchmarks/grpc_event_engine.py, 2026-12-01, two make bench runs): 563 / 874 us with the
defaults, 470 / 802 us with the server's EventEngine listener off, 379 / 668 us with the client's EventEngine
client off, 321 / 569 us with both (1.75x / 1.54x; benchmarks/RESULTS.md, section grpc_event_engine). grpcio
reads its experiment switches (``GRPC_EXPERIMENTS``) once, when it is imported, so the programs that own their
process call :func:`disable_grpc_experiments` before that: the ``servelab`` command's ``main`` (servers
and clients), the load generator's worker processes and the benchmark scripts. Importing a servelab
module never does.

A ``GRPC_EXPERIMENTS`` set by the user is never changed (set it, even empty, to keep grpc's defaults),
and nothing happens once grpc is imported.
"""

from __future__ import annotations

import os
import sys

__all__ = ["CLIENT_EXPERIMENTS", "SERVER_EXPERIMENTS", "disable_grpc_experiments"]

SERVER_EXPERIMENTS = ("event_engine_listener",)
CLIENT_EXPERIMENTS = ("event_engine_client",)
_VAR = "GRPC_EXPERIMENTS"


def disable_grpc_experiments(names: tuple[str, ...]) -> bool:
    """Turn the named grpc experiments off for this process; False when it is too late or not ours to set.

    A value made only of the switches this module sets (e.g. inherited from a servelab parent process)
    is extended; any other value, the empty string included, is the user's and stays as it is.
    """
    if "grpc" in sys.modules:
        return False  # grpc has read its settings already
    current = os.environ.get(_VAR)
    ours = {f"-{name}" for name in SERVER_EXPERIMENTS + CLIENT_EXPERIMENTS}
    entries = {e.strip() for e in current.split(",") if e.strip()} if current is not None else set()
    if current is not None and (not entries or not entries <= ours):
        return False  # the user chose
    entries.update(f"-{name}" for name in names)
    os.environ[_VAR] = ",".join(sorted(entries))
    return True
