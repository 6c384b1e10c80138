"""Commands that need more than ``pip install servelab``: a one-line hint naming the extra, not a traceback.

``servelab serve`` runs on the core dependencies alone; ``servelab bench`` and ``compare`` are the
measuring instrument and need the ``bench`` extra. The modules each extra must make importable are
listed here (tests/unit/test_extras.py keeps them in step with pyproject.toml).
"""

from __future__ import annotations

import importlib.util

import typer

__all__ = ["EXTRA_MODULES", "missing_modules", "require_extra"]

#: pip extra -> top-level modules it installs
EXTRA_MODULES: dict[str, tuple[str, ...]] = {"bench": ("aiohttp", "psutil", "matplotlib")}


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here (found without importing them)."""
    return [name for name in EXTRA_MODULES[extra] if importlib.util.find_spec(name) is None]


def require_extra(extra: str, command: str) -> None:
    """Exit with status 2 and ``pip install 'servelab[extra]'`` when ``extra`` is not installed."""
    missing = missing_modules(extra)
    if missing:
        typer.echo(
            f"error: `servelab {command}` needs the {extra} extra ({', '.join(missing)} not installed): "
            f"pip install 'servelab[{extra}]'",
            err=True,
        )
        raise typer.Exit(code=2)
