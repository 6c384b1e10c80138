"""servelab: serve models over the Open Inference Protocol and measure which runtime meets your SLA.

``from servelab import Engine`` gives the in-process API; ``servelab serve REPO`` the server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Engine", "__version__"]

if TYPE_CHECKING:
    from servelab.engine import Engine


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from servelab.engine import Engine

        return Engine
    raise AttributeError(f"module 'servelab' has no attribute {name!r}")
