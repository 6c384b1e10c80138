"""The compare HTML report as a browser shows it: a real (short) compare, opened in headless Chromium.

A tiny ONNX model is measured in-process, on a `servelab serve` subprocess and on the FastAPI + ORT
peer; the report is loaded with ``--dump-dom`` (the parsed DOM: results table, chart images) and
``--screenshot`` (the rendered page: the CSS and the charts actually paint). Skipped only when there
is no ``chromium`` on PATH (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import base64
import html.parser
import io
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from harness.repository import tiny_repository
from servelab.bench.compare import CompareResult, CompareRow, CompareSpec, run_compare
from servelab.bench.peers.compare_report import COLUMNS, best_cells, write_html
from servelab.bench.peers.targets import parse_targets

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium)"
)

TARGETS = ("inprocess-ort", "servelab-onnxruntime", "fastapi-ort")
BATCHES = (1, 8)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: colours the report's CSS and charts paint with (compare_report: td.best, compared targets' bars)
BEST_CELL_RGB = (0xD9, 0xF2, 0xDD)
BAR_RGB = (0x3B, 0x6F, 0xC4)


class _Dom(html.parser.HTMLParser):
    """Header cells, body rows (cell text and class) and <img> elements of the dumped DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.head: list[str] = []
        self.rows: list[list[tuple[str, str]]] = []
        self.row_classes: list[str] = []
        self.imgs: list[dict[str, str]] = []
        self._section: str | None = None
        self._in: str | None = None  # "th" | "td"
        self._tbody = False
        self._cls = ""
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "section":
            self._section = a.get("id")
        elif tag == "img":
            self.imgs.append({**a, "section": self._section or ""})
        elif self._section == "results":
            if tag == "tbody":
                self._tbody = True
            elif tag == "tr" and self._tbody:
                self.rows.append([])
                self.row_classes.append(a.get("class", ""))
            elif tag in ("th", "td"):
                self._in, self._cls, self._text = tag, a.get("class", ""), []

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self._section = None
        elif tag == "tbody":
            self._tbody = False
        elif tag == self._in:
            text = "".join(self._text).strip()
            if tag == "th":
                self.head.append(text)
            else:
                self.rows[-1].append((text, self._cls))
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in:
            self._text.append(data)


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
        f"--user-data-dir={profile}", *args,
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"chromium exited {done.returncode}: {done.stderr[-2000:]}"
    return done


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def test_best_cells_rank_the_compared_targets_not_the_baseline() -> None:
    def row(target: str, batch: int, p50: float, ips: float, rss: float | None) -> CompareRow:
        return CompareRow(
            target=target, protocol="http", batch_size=batch, p50_ms=p50, p99_ms=2 * p50, requests_per_s=ips / batch,
            inferences_per_s=ips, server_rss_mb=rss, stable=True, errors=0, throughput_ratio=None, p50_ratio=None,
        )  # fmt: skip

    rows = [
        row("base", 1, 0.1, 900.0, None), row("a", 1, 1.0, 100.0, 50.0), row("b", 1, 2.0, 300.0, 50.0),
        row("base", 8, 0.1, 900.0, None), row("a", 8, 3.0, 400.0, 60.0), row("b", 8, 3.0, 200.0, 40.0),
    ]  # fmt: skip
    col = {name: i for i, name in enumerate(COLUMNS)}
    best = best_cells(rows, "base")
    assert not any(i in (0, 3) for i, _ in best), "the baseline is not ranked"
    assert {(i, col["inf/s"]) for i in range(6)} & best == {(2, col["inf/s"]), (4, col["inf/s"])}
    assert {(i, col["P50 ms"]) for i in range(6)} & best == {
        (1, col["P50 ms"]),
        (4, col["P50 ms"]),
        (5, col["P50 ms"]),
    }
    assert {(i, col["RSS MB"]) for i in range(6)} & best == {
        (1, col["RSS MB"]),
        (2, col["RSS MB"]),
        (5, col["RSS MB"]),
    }
    # no baseline: everyone is ranked
    assert (0, col["inf/s"]) in best_cells(rows, None)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CompareResult]:
    tmp = tmp_path_factory.mktemp("report")
    spec = CompareSpec(
        model="tiny", repository=tiny_repository(tmp / "repo"), targets=tuple(parse_targets(",".join(TARGETS))),
        batch_sizes=BATCHES, concurrency=2, baseline="inprocess-ort", measurement_interval_ms=200, max_windows=3,
        warmup_requests=5, max_level_s=10.0,
    )  # fmt: skip
    result = run_compare(spec)
    assert [o.error for o in result.outcomes] == [None] * len(TARGETS)
    page = tmp / "compare.html"
    write_html(result, page)
    return page, result


@needs_chromium
def test_report_dom_in_chromium(report: tuple[Path, CompareResult], tmp_path: Path) -> None:
    page, result = report
    dom = _Dom()
    dom.feed(_chromium(tmp_path / "profile", "--dump-dom", page.as_uri()).stdout)

    assert tuple(dom.head) == COLUMNS
    # grouped by batch size, targets in measurement order within each group
    assert [(r[0][0], int(r[2][0])) for r in dom.rows] == [(t, b) for b in BATCHES for t in TARGETS]
    col = {name: i for i, name in enumerate(COLUMNS)}
    by_key = {(r.target, r.batch_size): r for r in result.rows()}
    for cells, classes in zip(dom.rows, dom.row_classes, strict=True):
        text = [c[0] for c in cells]
        row = by_key[(text[0], int(text[2]))]
        p50, p99, rps, ips = (_num(text[col[c]]) for c in ("P50 ms", "P99 ms", "req/s", "inf/s"))
        assert 0 < p50 <= p99 and rps > 0
        assert p50 == pytest.approx(row.p50_ms, abs=0.006) and ips == pytest.approx(
            row.inferences_per_s, abs=0.6
        )
        assert ips == pytest.approx(rps * row.batch_size, rel=0.02, abs=row.batch_size)
        if row.target == "inprocess-ort":
            assert "base" in classes and text[col["RSS MB"]] == "-"
            assert _num(text[col["x thr"]]) == pytest.approx(1.0) and _num(
                text[col["x P50"]]
            ) == pytest.approx(1.0)
            assert not any(c[1] == "best" for c in cells), "the baseline is not ranked"
        else:
            assert _num(text[col["RSS MB"]]) > 10 and _num(text[col["x thr"]]) > 0

    # per batch size, the highlighted inf/s cell is the largest of the compared targets (and P50 the smallest)
    for b in BATCHES:
        group = [r for r in dom.rows if int(r[2][0]) == b and r[0][0] != "inprocess-ort"]
        for name, pick in (("inf/s", max), ("P50 ms", min)):
            best = pick(_num(r[col[name]][0]) for r in group)
            marked = [_num(r[col[name]][0]) for r in group if r[col[name]][1] == "best"]
            assert marked and set(marked) == {best}, (name, b, group)

    charts = [i for i in dom.imgs if i["section"] == "charts"]
    assert [i["alt"].split(":")[0] for i in charts] == [f"batch {b}" for b in BATCHES]
    for img in charts:
        prefix = "data:image/png;base64,"
        assert img["src"].startswith(prefix)
        png = base64.b64decode(img["src"][len(prefix) :], validate=True)
        assert png[:8] == PNG_MAGIC and len(png) > 10_000
        with Image.open(io.BytesIO(png)) as im:
            assert im.width >= 800 and im.height >= 150
            pixels = np.asarray(im.convert("RGB")).reshape(-1, 3)
        assert len(np.unique(pixels, axis=0)) > 16, "a blank chart"
        assert _pixels_of(pixels, BAR_RGB) >= 1_000, "no bars of the compared targets in the chart"


def _pixels_of(rgb: np.ndarray, colour: tuple[int, int, int]) -> int:
    """How many pixels are within 8 per channel of ``colour``."""
    return int(np.all(np.abs(rgb.astype(int) - np.array(colour)) <= 8, axis=-1).sum())


@needs_chromium
def test_report_screenshot_in_chromium(report: tuple[Path, CompareResult], tmp_path: Path) -> None:
    page, _ = report
    shot = tmp_path / "shot.png"
    _chromium(tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri())
    data = shot.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 20_000
    with Image.open(shot) as im:
        assert im.size == (1280, 2000)
        rgb = np.asarray(im.convert("RGB"))
    assert len(np.unique(rgb.reshape(-1, 3), axis=0)) > 50, "the screenshot is (nearly) blank"
    # the stylesheet applied (highlighted best cells) and the chart images painted (the targets' bars)
    assert _pixels_of(rgb, BEST_CELL_RGB) >= 5_000, "no highlighted table cells on the screenshot"
    assert _pixels_of(rgb, BAR_RGB) >= 2_000, "no chart bars on the screenshot"
