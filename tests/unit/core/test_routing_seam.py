"""The routing seam is the only place that picks a model version (DESIGN.md: core/routing/).

An AST scan of every module of the package outside ``servelab/core/routing/``: none asks the registry for
its version map (``serving``), indexes or ``.get``s a ``versions`` mapping, takes ``max`` of one, picks
``["versions"][-1]`` out of metadata, or reads version labels (TF Serving's ``PARAM_LABELS``) except the
TF Serving loaders that write them. The registry itself only hands out the loaded versions.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import servelab
from servelab.core.registry import ModelRegistry

SRC = Path(servelab.__file__).parent
ROUTING = SRC / "core" / "routing"
REGISTRY = SRC / "core" / "registry.py"
#: modules that write TF Serving's labels into configs (the source the router reads them from)
LABEL_WRITERS = {SRC / "repository" / "tfserving.py", SRC / "repository" / "tfserving_layout.py",
                 SRC / "repository" / "tfserving_import.py"}


def _is_versions(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "versions"


def _findings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(SRC)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "serving":
                found.append(f"{where}: calls .serving() (the registry's version map)")
            if node.func.attr == "get" and _is_versions(node.func.value):
                found.append(f"{where}: picks from a versions mapping with .get()")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("max", "min")
                and any(_is_versions(a) for a in node.args)):
            found.append(f"{where}: {node.func.id}() over a versions mapping")
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):  # writing or deleting is no choice
            if _is_versions(node.value):
                found.append(f"{where}: indexes a versions mapping")
            inner = node.value
            if (isinstance(inner, ast.Subscript) and isinstance(inner.slice, ast.Constant)
                    and inner.slice.value == "versions"):
                found.append(f"{where}: picks an element of metadata['versions']")
        if isinstance(node, ast.Name) and node.id == "PARAM_LABELS" and path not in LABEL_WRITERS:
            found.append(f"{where}: reads version labels (PARAM_LABELS)")
    return found


def test_no_module_outside_core_routing_picks_a_version() -> None:
    modules = [p for p in SRC.rglob("*.py")
               if ROUTING not in p.parents and "_generated" not in p.parts and p != REGISTRY]
    assert len(modules) > 150  # the whole package is scanned
    findings = [f for p in modules for f in _findings(p)]
    assert not findings, "version choices outside servelab.core.routing:\n" + "\n".join(findings)


def test_the_scan_sees_what_it_forbids(tmp_path: Path) -> None:
    """The scan would catch each way of picking a version (so the test above can fail)."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "lv = registry.serving(name)[3]\n"
        "lv = record.versions[max(record.versions)]\n"
        "lv = record.versions.get(2)\n"
        "newest = meta['versions'][-1]\n"
        "from x import PARAM_LABELS\nlabels = PARAM_LABELS\n"
    )
    original = globals()["SRC"]
    globals()["SRC"] = tmp_path
    try:
        kinds = {f.split(": ", 1)[1] for f in _findings(bad)}
    finally:
        globals()["SRC"] = original
    assert kinds == {
        "calls .serving() (the registry's version map)", "indexes a versions mapping",
        "max() over a versions mapping", "picks from a versions mapping with .get()",
        "picks an element of metadata['versions']", "reads version labels (PARAM_LABELS)",
    }


def test_the_registry_hands_out_versions_but_chooses_none() -> None:
    """``serving`` returns the map, ``loaded`` looks up the version that already answered (statistics);
    nothing else in the registry touches a versions mapping the scan forbids."""
    assert not hasattr(ModelRegistry, "get")
    assert "max(" not in inspect.getsource(ModelRegistry.serving)
    lines, start = inspect.getsourcelines(ModelRegistry.loaded)
    allowed = range(start, start + len(lines))
    stray = [f for f in _findings(REGISTRY) if int(f.split(":")[1]) not in allowed]
    assert not stray, stray
    callers = {p for p in SRC.rglob("*.py") if "_generated" not in p.parts and ".serving(" in p.read_text()}
    assert {p.parent for p in callers} == {ROUTING}, callers  # the router and its control, nothing else
