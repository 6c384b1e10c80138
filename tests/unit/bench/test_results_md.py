"""Marked sections of RESULTS.md: a script rewrites its own section and nothing else, atomically."""

from __future__ import annotations

import argparse
import math
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.bench import results_md
from servelab.bench.results_md import (
    args_for_json,
    markdown_table,
    read_section,
    section_names,
    write_section,
)
from servelab.errors import InvalidArgument

DOC = (
    "# Results\r\n"  # a CRLF line, trailing spaces and no newline at the end: all must survive
    "Prose above, kept.   \n"
    "<!-- BEGIN alpha -->\n"
    "| old | table |\n"
    "<!-- END alpha -->\n"
    "Prose between.\n"
    "<!-- BEGIN beta -->\n"
    "beta body\n"
    "<!-- END beta -->\n"
    "tail without newline"
)


def _write(tmp_path: Path, text: str = DOC) -> Path:
    path = tmp_path / "RESULTS.md"
    path.write_bytes(text.encode())
    return path


def test_replaces_only_the_named_section(tmp_path: Path) -> None:
    path = _write(tmp_path)
    write_section(path, "alpha", "| new | table |\n|---|---|\n| 1 | 2 |")
    assert path.read_bytes().decode() == DOC.replace(
        "| old | table |\n", "| new | table |\n|---|---|\n| 1 | 2 |\n"
    )
    assert read_section(path, "beta") == "beta body\n"


def test_adds_a_missing_section_at_the_end(tmp_path: Path) -> None:
    path = _write(tmp_path)
    write_section(path, "gamma", "gamma body\n\n\n")
    text = path.read_bytes().decode()
    assert text == DOC + "\n\n<!-- BEGIN gamma -->\ngamma body\n<!-- END gamma -->\n"
    assert section_names(text) == ["alpha", "beta", "gamma"]


def test_appends_after_a_blank_line_when_the_file_ends_with_a_newline(tmp_path: Path) -> None:
    path = _write(tmp_path, "# R\n")
    write_section(path, "a", "x")
    assert path.read_text() == "# R\n\n<!-- BEGIN a -->\nx\n<!-- END a -->\n"


def test_creates_the_file_and_its_folder(tmp_path: Path) -> None:
    path = tmp_path / "new" / "RESULTS.md"
    write_section(path, "only", "body")
    assert path.read_text() == "<!-- BEGIN only -->\nbody\n<!-- END only -->\n"
    assert read_section(tmp_path / "absent.md", "only") is None


def test_same_content_twice_is_the_same_file(tmp_path: Path) -> None:
    path = _write(tmp_path)
    write_section(path, "beta", "beta body")
    assert path.read_bytes().decode() == DOC


def test_empty_section_gets_a_body(tmp_path: Path) -> None:
    path = _write(tmp_path, "a\n<!-- BEGIN e -->\n<!-- END e -->\nb\n")
    write_section(path, "e", "now")
    assert path.read_text() == "a\n<!-- BEGIN e -->\nnow\n<!-- END e -->\nb\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<!-- END a -->\nx\n<!-- BEGIN a -->\n", "before"),
        ("<!-- BEGIN a -->\nx\n", "before"),
        ("x\n<!-- END a -->\n", "before"),
        ("<!-- BEGIN a -->\n<!-- BEGIN a -->\n<!-- END a -->\n", "appears 2 times"),
    ],
)
def test_malformed_markers_are_refused_and_the_file_kept(tmp_path: Path, text: str, expected: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(InvalidArgument, match=expected) as err:
        write_section(path, "a", "new")
    assert "'a'" in err.value.message or "a -->" in err.value.message
    assert path.read_text() == text


def test_a_marker_inside_a_longer_line_is_not_a_marker(tmp_path: Path) -> None:
    path = _write(tmp_path, "see `<!-- BEGIN a -->` in the docs\n")
    write_section(path, "a", "body")
    assert path.read_text().startswith("see `<!-- BEGIN a -->` in the docs\n\n<!-- BEGIN a -->\nbody\n")


@pytest.mark.parametrize("name", ["", "has space", "-dash-first", "a>b", "x\ny"])
def test_bad_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidArgument, match="section name"):
        write_section(tmp_path / "R.md", name, "x")


def test_markdown_with_markers_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="must not contain section markers"):
        write_section(tmp_path / "R.md", "a", "x\n<!-- END a -->\ny")


def test_mode_kept_and_no_temporary_file_left(tmp_path: Path) -> None:
    path = _write(tmp_path)
    path.chmod(0o600)
    write_section(path, "alpha", "new")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["RESULTS.md"]


def test_a_failed_replace_leaves_the_old_file_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path)

    def refuse(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(results_md.os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        write_section(path, "alpha", "new")
    assert path.read_bytes().decode() == DOC
    assert sorted(p.name for p in tmp_path.iterdir()) == ["RESULTS.md"]


_line = st.text(st.characters(blacklist_characters="\n<", blacklist_categories=("Cs",)), max_size=20)


@settings(max_examples=60, deadline=None)
@given(before=st.lists(_line, max_size=4), after=st.lists(_line, max_size=4), body=st.lists(_line, max_size=4))
def test_round_trip_keeps_the_outside(tmp_path_factory: pytest.TempPathFactory, before: list[str],
                                      after: list[str], body: list[str]) -> None:  # fmt: skip
    path = tmp_path_factory.mktemp("rt") / "R.md"
    head = "".join(f"{line}\n" for line in before)
    tail = "".join(f"{line}\n" for line in after)
    path.write_bytes(f"{head}<!-- BEGIN s -->\nold\n<!-- END s -->\n{tail}".encode())
    markdown = "\n".join(body)
    write_section(path, "s", markdown)
    expected = f"{head}<!-- BEGIN s -->\n{markdown.strip(chr(10))}\n<!-- END s -->\n{tail}"
    assert path.read_bytes().decode() == expected  # bytes: read_text() would turn a lone \r into \n
    assert read_section(path, "s") == markdown.strip("\n") + "\n"


def test_markdown_table() -> None:
    text = markdown_table(("a", "b|c"), [(1, None), ("x|y", math.nan)])
    assert text == "| a | b\\|c |\n|---|---|\n| 1 | - |\n| x\\|y | - |\n"
    with pytest.raises(InvalidArgument, match="2 cells, expected 3"):
        markdown_table(("a", "b", "c"), [(1, 2)])


def test_args_for_json_names_paths_relative_to_the_repository(tmp_path: Path) -> None:
    args = argparse.Namespace(output=tmp_path / "benchmarks" / "results" / "x.json", elsewhere=Path("/opt/x"), rounds=3)
    assert args_for_json(args, tmp_path) == {"output": "benchmarks/results/x.json", "elsewhere": "/opt/x", "rounds": 3}
