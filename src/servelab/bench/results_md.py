"""Marked sections of a results file (benchmarks/RESULTS.md): each benchmark script rewrites its own.

A section is the text between a ``<!-- BEGIN name -->`` line and the matching ``<!-- END name -->`` line.
:func:`write_section` replaces what lies between the two markers and leaves every other byte of the file
as it was, so prose written by hand around a table survives every re-run, and a table inside markers is
only ever the output of the script that measured it. The file is replaced atomically (a temporary file in
the same folder, then ``os.replace``), so an interrupted run never leaves half a table behind.

Only the standard library is imported here: scripts call it after measuring, tests without any extra.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from servelab.errors import InvalidArgument

__all__ = [
    "add_results_md_options", "begin_marker", "end_marker", "markdown_table", "read_section", "section_names",
    "write_results", "write_section",
]  # fmt: skip

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_BEGIN_LINE = re.compile(r"^<!-- BEGIN (\S+) -->[ \t\r]*$", re.MULTILINE)
_ANY_MARKER = re.compile(r"^<!-- (?:BEGIN|END) \S+ -->", re.MULTILINE)


def _check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise InvalidArgument(
            f"section name must be letters, digits, '_', '.' or '-' (starting with a letter or digit), got {name!r}"
        )
    return name


def begin_marker(name: str) -> str:
    """The line that opens section ``name``."""
    return f"<!-- BEGIN {_check_name(name)} -->"


def end_marker(name: str) -> str:
    """The line that closes section ``name``."""
    return f"<!-- END {_check_name(name)} -->"


def _line_span(text: str, marker: str, where: str) -> tuple[int, int] | None:
    """(start, end) of the one line that is ``marker`` (end before its newline); None when absent."""
    found = [m.span() for m in re.finditer(rf"^{re.escape(marker)}[ \t\r]*$", text, re.MULTILINE)]
    if len(found) > 1:
        raise InvalidArgument(f"{where}: {marker!r} appears {len(found)} times, expected once")
    return found[0] if found else None


def _body_span(text: str, name: str, where: str) -> tuple[int, int] | None:
    """Offsets of the text between the BEGIN line and the END line, or None when the section is absent."""
    begin = _line_span(text, begin_marker(name), where)
    end = _line_span(text, end_marker(name), where)
    if begin is None and end is None:
        return None
    if begin is None or end is None or end[0] <= begin[1]:
        raise InvalidArgument(
            f"{where}: section {name!r} needs {begin_marker(name)!r} on a line before {end_marker(name)!r}"
        )
    return begin[1] + 1, end[0]  # the body starts after the BEGIN line's newline


def section_names(text: str) -> list[str]:
    """Names of every section opened in ``text``, in order."""
    return _BEGIN_LINE.findall(text)


def read_section(path: str | Path, name: str) -> str | None:
    """The body of section ``name`` in the file at ``path`` (without its markers), or None when absent."""
    path = Path(path)
    if not path.is_file():
        return None
    text = path.read_bytes().decode("utf-8")
    span = _body_span(text, name, str(path))
    return None if span is None else text[span[0] : span[1]]


def write_section(path: str | Path, name: str, markdown: str) -> None:
    """Make ``markdown`` the body of section ``name`` in ``path``; add the section at the end if absent.

    Everything outside the markers is kept byte for byte. The body always ends with one newline before
    the END marker. The file (and its folder) is created when missing.
    """
    path = Path(path)
    body = markdown.strip("\n") + "\n"
    if _ANY_MARKER.search(body):
        raise InvalidArgument(f"section {name!r}: the markdown must not contain section markers itself")
    text = path.read_bytes().decode("utf-8") if path.exists() else ""
    span = _body_span(text, name, str(path))
    if span is None:
        lead = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
        new = f"{text}{lead}{begin_marker(name)}\n{body}{end_marker(name)}\n"
    else:
        new = text[: span[0]] + body + text[span[1] :]
    if new != text or not path.exists():
        _replace(path, new.encode("utf-8"))


def add_results_md_options(parser: argparse.ArgumentParser, section: str, default: Path) -> None:
    """The two options of every benchmark script: ``--results-md PATH`` (default ``default``), whose
    section ``section`` the script rewrites, and ``--no-results-md``, which leaves it alone (``None``)."""
    parser.add_argument("--results-md", type=Path, default=default, help=f"rewrite its section {section!r}")
    parser.add_argument("--no-results-md", dest="results_md", action="store_const", const=None)


def args_for_json(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """A script's arguments as its JSON records them: paths under ``root`` (the repository) relative to it,
    so the committed results name no machine's folders."""

    def portable(value: object) -> object:
        if isinstance(value, Path):
            return str(value.relative_to(root)) if value.is_relative_to(root) else str(value)
        return value

    return {k: portable(v) for k, v in vars(args).items()}


def write_results(doc: dict[str, Any], out: Path, results_md: Path | None, section: str,
                  render: Callable[[dict[str, Any]], str]) -> None:
    """What a benchmark script writes when it has measured: ``doc`` as JSON to ``out`` (its folder created)
    and, unless ``results_md`` is None, section ``section`` of it as ``render(doc)``; says each on stdout."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out}")
    if results_md is not None:
        write_section(results_md, section, render(doc))
        print(f"wrote section {section!r} of {results_md}")


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and an atomic rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            shutil.copymode(path, tmp)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _cell(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured markdown table; None and NaN cells print as ``-``, ``|`` in a cell is escaped."""
    lines = ["| " + " | ".join(_cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = list(row)
        if len(cells) != len(columns):
            raise InvalidArgument(f"table row has {len(cells)} cells, expected {len(columns)}: {cells!r}")
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"
