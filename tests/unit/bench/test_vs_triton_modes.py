"""benchmarks/vs_triton.py's servelab modes: the inline copy declares the models non-blocking (model.py
untouched, Triton's files untouched) and the section names the mode of every row."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.bench_scripts import import_benchmark


@pytest.fixture(scope="module")
def vs_triton():  # type: ignore[no-untyped-def]
    return import_benchmark("vs_triton")


def test_the_inline_copy_declares_each_model_and_leaves_the_original(vs_triton, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from servelab.backends.parameters import PythonParameters, SchedulerParameters
    from servelab.repository.config import read_config

    repo = tmp_path / "models"
    for name in vs_triton.MODELS:
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text("# the user's model\n")
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n')
    copy = vs_triton.inline_copy(repo, tmp_path / "models-inline")
    for name in vs_triton.MODELS:
        config, _ = read_config(copy / name)
        assert SchedulerParameters.read(config).instance_mode == "thread"
        assert PythonParameters.read(config).never_blocks
        assert (copy / name / "1" / "model.py").read_text() == "# the user's model\n"
        assert "parameters" not in (repo / name / "config.pbtxt").read_text()


def _doc(modes: list[str] | None) -> dict:  # type: ignore[type-arg]
    settings = {"measurement_interval_ms": 2000, "stability_percentage": 10.0, "max_trials": 10, "percentile": 99,
                "rounds": 2, "concurrency": [4], "protocols": ["http"], "models": ["add_sub"]}  # fmt: skip
    if modes is not None:
        settings["servelab_modes"] = modes
    cell = {"inferences_per_s": 5000.0, "p50_us": 700.0, "p99_us": 900.0, "server_rss_mb": 100.0}
    rows = [{"model": "add_sub", "protocol": "http", "concurrency": 4, "mode": m, "servelab": cell,
             "triton": {**cell, "inferences_per_s": 4000.0}, "servelab_failures": [], "triton_failures": [],
             "throughput_ratio": 1.25, "p99_ratio": 1.0, "meets_bar": True} for m in (modes or ["process"])]  # fmt: skip
    return {"perf_analyzer": "2.40.0", "triton": "2.51.0", "settings": settings, "rows": rows}


def test_the_section_names_the_mode_of_every_row(vs_triton) -> None:  # type: ignore[no-untyped-def]
    text = vs_triton.results_markdown(_doc(["process", "inline"]))
    assert "| servelab mode |" in text and "| add_sub | HTTP | 4 | inline | 5,000 |" in text
    assert "instance_mode thread + execute_never_blocks" in text and "untouched config.pbtxt" in text
    old = vs_triton.results_markdown(_doc(None))  # a document from before the modes renders as it did
    assert "servelab mode" not in old and "both servers up" in old


def test_process2_runs_the_untouched_files_in_two_processes_and_is_not_a_default(vs_triton) -> None:  # type: ignore[no-untyped-def]
    assert vs_triton._MODE_ARGS["process2"] == ("--processes", "2")
    assert "process2" not in vs_triton.DEFAULT_MODES and set(vs_triton.DEFAULT_MODES) <= set(vs_triton.SERVELAB_MODES)
    text = vs_triton.results_markdown(_doc(["process", "process2"]))
    assert "| add_sub | HTTP | 4 | process2 | 5,000 |" in text and "`--processes 2`" in text
    assert "untouched config.pbtxt" not in text  # no inline mode: Triton and servelab get the same files
