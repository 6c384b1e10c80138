"""servelab select end to end on a tiny model and a tiny grid: the config it writes loads and serves on a
real ``servelab serve``, and its HTML report opens in headless Chromium with its tables and charts.

Skipped parts only where Chromium is absent (Debian: apt-get install chromium), as the compare report test.
"""

from __future__ import annotations

import base64
import html.parser
import io
import shutil
import subprocess
import textwrap
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from harness.servers import running_server
from servelab.advisor.grid import Batching
from servelab.advisor.matrix import Constraints, parse_weights
from servelab.advisor.report import MATRIX_COLUMNS, write_reports
from servelab.advisor.select import SelectResult, SelectSpec, run_select
from servelab.advisor.wire import MeasureSettings
from servelab.backends import backend_parameters
from servelab.repository import parse_config_text

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium)")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FACTORY = textwrap.dedent(
    """
    import torch

    input_names = ["x"]
    output_names = ["y"]

    def make_model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))

    def example_inputs():
        return torch.zeros(2, 8)
    """
)


@pytest.fixture(scope="module")
def selected(tmp_path_factory: pytest.TempPathFactory) -> tuple[SelectResult, Path, dict[str, Path]]:
    tmp = tmp_path_factory.mktemp("select")
    (tmp / "net.py").write_text(FACTORY)
    np.savez(tmp / "data.npz", x=np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32))
    spec = SelectSpec(
        model=str(tmp / "net.py"), repo=tmp / "repo", report_dir=tmp / "report", data=tmp / "data.npz",
        constraints=Constraints(sla_p99_ms=250.0), weights=parse_weights(None),
        measure=MeasureSettings(250.0, window_ms=150, max_windows=3, warmup_requests=5, closed_concurrency=4, rate_steps=1),
        targets=("onnx", "torchscript"), precisions=("fp32",), batchings=(Batching(), Batching(4, 100)),
        instances=(1,), threads=(1,), front_doors=("rest",), peers=(), budget_fraction=1.0, inprocess_s=0.1,
    )  # fmt: skip
    result = run_select(spec)
    return result, tmp / "repo", write_reports(result, tmp / "report")


def test_select_writes_a_config_that_serves(selected: tuple[SelectResult, Path, dict[str, Path]], tmp_path: Path) -> None:
    result, repo, _ = selected
    assert result.grid.size == 4 and 1 <= len(result.measured) <= 4
    assert result.data_source.startswith("file ")
    winner = result.decision.winner
    assert winner is not None and winner.max_rate > 0 and winner.candidate is not None
    config = parse_config_text((repo / "net" / "config.pbtxt").read_text(), "selected")
    assert config.name == "net" and config.backend == winner.candidate.artefact.backend
    assert config.HasField("dynamic_batching") == winner.candidate.batching.on
    assert config.instance_group[0].count == 1
    if winner.candidate.batching.on:
        batching = winner.candidate.batching
        assert (config.max_batch_size, config.dynamic_batching.max_queue_delay_microseconds) == (
            batching.max_batch_size, batching.max_queue_delay_us)
    params = backend_parameters(config.backend).read(config)  # written through the schema the backend reads
    assert params.threads_field is not None and getattr(params, params.threads_field) == winner.candidate.threads
    with running_server(repo, tmp_path, "selected", "--model-control-mode", "explicit", "--load-model", "net") as server:
        x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [3, 8], "data": x.ravel().tolist()}]}
        r = httpx.post(f"{server.http_url}/v2/models/net/infer", json=body, timeout=30)
        assert r.status_code == 200, r.text
        out = r.json()["outputs"][0]
        assert out["shape"] == [3, 2] and all(np.isfinite(out["data"]))
    # every other row says why it lost
    assert all(row.verdict for row in result.decision.rows)
    assert result.to_dict()["points_measured"] == len(result.measured)


class _Dom(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, list[list[str]]] = {}
        self.heads: dict[str, list[str]] = {}
        self.imgs: list[dict[str, str]] = []
        self._section = ""
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "section":
            self._section = a.get("id", "")
            self.sections.setdefault(self._section, [])
        elif tag == "img":
            self.imgs.append({**a, "section": self._section})
        elif tag == "tr" and self._section:
            self.sections[self._section].append([])
        elif tag in ("td", "th") and self._section:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self._section = ""
        elif tag in ("td", "th") and self._cell is not None:
            text = "".join(self._cell).strip()
            if tag == "th":
                self.heads.setdefault(self._section, []).append(text)
            else:
                self.sections[self._section][-1].append(text)
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}", *args]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"chromium exited {done.returncode}: {done.stderr[-2000:]}"
    return done


@needs_chromium
def test_report_opens_in_chromium_with_tables_and_charts(selected: tuple[SelectResult, Path, dict[str, Path]], tmp_path: Path) -> None:
    result, _, paths = selected
    dom = _Dom()
    dom.feed(_chromium(tmp_path / "profile", "--dump-dom", paths["html"].as_uri()).stdout)
    assert tuple(dom.heads["matrix"]) == MATRIX_COLUMNS
    rows = [r for r in dom.sections["matrix"] if r]
    assert len(rows) == len(result.decision.rows)
    selected_rows = [r for r in rows if r[0].endswith("(selected)")]
    assert len(selected_rows) == 1 and float(selected_rows[0][2].replace(",", "")) > 0
    assert [r for r in dom.sections["inprocess"] if r] and [r for r in dom.sections["conversions"] if r]
    charts = [i for i in dom.imgs if i["section"] == "charts"]
    assert [c["alt"] for c in charts] == ["latency-throughput curves", "Pareto chart"]
    for img in charts:
        png = base64.b64decode(img["src"].removeprefix("data:image/png;base64,"), validate=True)
        assert png[:8] == PNG_MAGIC
        with Image.open(io.BytesIO(png)) as im:
            assert im.width >= 600 and im.height >= 300
            assert len(np.unique(np.asarray(im.convert("RGB")).reshape(-1, 3), axis=0)) > 16, "a blank chart"
    shot = tmp_path / "shot.png"
    _chromium(tmp_path / "profile", f"--screenshot={shot}", "--window-size=1300,2000", paths["html"].as_uri())
    with Image.open(shot) as im:
        rgb = np.asarray(im.convert("RGB")).reshape(-1, 3)
    selected_green = np.all(np.abs(rgb.astype(int) - np.array((0xD9, 0xF2, 0xDD))) <= 8, axis=-1).sum()
    assert selected_green >= 2_000, "the selected row's highlight did not paint"
    md = paths["markdown"].read_text()
    assert "## Decision matrix" in md and "select_curves.png" in md and (paths["markdown"].parent / "select_curves.png").is_file()
