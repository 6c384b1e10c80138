"""Fail when modules of src/ or benchmarks/ import each other in a loop, of any length.

Every import statement counts, also those inside functions and under ``if TYPE_CHECKING:``: a lazy
import hides a cycle from the interpreter, not from the reader. An import names the deepest module it
reaches (``from a.b import c`` is ``a.b.c`` when that is a module, else ``a.b``). A module always
imports its parent packages first, so an edge to an ancestor package counts only when a name other
than a submodule is taken from it (``from servelab.bench import LoadSpec`` inside servelab.bench.x:
a real loop through the package's ``__init__``). Benchmark scripts import each other by file name
(``from graphsage_e2e import ...``), as they do when run from benchmarks/.

Usage: ``python tools/check_cycles.py [ROOT]``; exit status 1 and one line per cycle when there is any.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["cycle_path", "find_cycles", "import_graph", "main"]

#: folder -> prefix of the module names of its files (src/servelab/x.py is servelab.x)
SOURCES = {"src": "", "benchmarks": "benchmarks."}
SKIP_PARTS = {"_generated", "__pycache__"}


def _module_names(root: Path) -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for folder, prefix in SOURCES.items():
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            if SKIP_PARTS & set(rel.parts):
                continue
            parts = list(rel.parts[:-1]) if rel.name == "__init__" else list(rel.parts)
            mods[prefix + ".".join(parts)] = path
    return mods


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    """The deepest known module that ``name`` lies in, or None for a module outside the tree."""
    if "benchmarks." + name in mods:
        return "benchmarks." + name
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> Iterator[tuple[str, bool]]:
    """(dotted name, names something other than a submodule?) for each target of one statement."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, False
        return
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
    for alias in node.names:
        yield f"{base}.{alias.name}", False
        yield base, True  # taken from the module itself, unless alias names a submodule (see deps)


def _deps(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        targets = list(_imported(node, package))
        submodules = {t for t, _ in targets if t in mods or "benchmarks." + t in mods}
        for target, from_module in targets:
            if from_module and all(f"{target}.{a.name}" in submodules for a in node.names):
                continue  # ``from pkg import sub`` takes submodules only, not the package's own names
            resolved = _resolve(target, mods)
            if resolved is None or resolved == name:
                continue
            if name.startswith(resolved + ".") and not from_module:
                continue  # importing an ancestor package by name happens anyway, first
            out.add(resolved)
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> modules of the tree that it imports anywhere in its text."""
    mods = _module_names(root)
    return {name: _deps(name, path, mods) for name, path in mods.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as sorted names."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(components)


def cycle_path(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One shortest loop through the component's first module, back to it (breadth-first)."""
    members, start = set(component), component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            if start in graph[v]:
                path = [v]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [*reversed(path), start]
            for w in sorted(graph[v] & members):
                if w not in previous and w != start:
                    previous[w] = v
                    following.append(w)
        frontier = following
    return component  # pragma: no cover - a component always has a loop through each member


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path(__file__).resolve().parent.parent
    graph = import_graph(root)
    cycles = find_cycles(graph)
    for members in cycles:
        loop = " -> ".join(cycle_path(members, graph))
        print(f"import cycle among {len(members)} modules ({', '.join(members)}), e.g. {loop}")
    if not cycles:
        print(f"no import cycles among {len(graph)} modules of {', '.join(SOURCES)}")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
