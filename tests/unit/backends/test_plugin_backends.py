"""Plug-in backends: the ``servelab.backends`` entry-point group, read through importlib.metadata.

A third-party plug-in here is a real installed distribution (a ``*.dist-info`` folder on sys.path,
as pip writes it), so the test exercises the same discovery path as an installed package.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from servelab.backends import BACKENDS, PLUGIN_GROUP, backend_class, plugin_backends
from servelab.errors import Unsupported

_MODULE = """
from servelab.backends.base import Backend


class EchoBackend(Backend):
    kind = "echo"

    def load(self) -> None:
        pass

    def infer(self, inputs):
        return dict(inputs)
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path holding one plug-in distribution, ``echo-plugin`` 0.1."""
    (tmp_path / "echo_plugin.py").write_text(_MODULE)
    (tmp_path / "broken_plugin.py").write_text("import a_runtime_that_is_not_installed\n")
    info = tmp_path / "echo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[{PLUGIN_GROUP}]\n"
        "echo = echo_plugin:EchoBackend\n"
        "broken = broken_plugin:Missing [fast]\n"
        "onnxruntime = echo_plugin:EchoBackend\n"  # cannot take over a core backend
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    plugin_backends.cache_clear()
    yield tmp_path
    sys.modules.pop("echo_plugin", None)
    plugin_backends.cache_clear()


def test_graphsage_backends_are_plug_ins_not_core_names() -> None:
    assert {"graphsage", "graphsage_sampler"}.isdisjoint(BACKENDS)
    assert not any(path.startswith("servelab.graph") for path, _ in BACKENDS.values())
    plugins = plugin_backends()
    assert plugins["graphsage"] == ("servelab.graph.fused:FusedSageBackend", "servelab[graph]")
    assert plugins["graphsage_sampler"] == ("servelab.graph.backend:GraphSamplerBackend", "servelab[graph]")
    assert backend_class("graphsage").__name__ == "FusedSageBackend"


def test_a_third_party_plug_in_is_found_by_name(site: Path) -> None:
    cls = backend_class("echo")
    assert cls.__name__ == "EchoBackend" and cls.__module__ == "echo_plugin"
    assert backend_class("onnxruntime").__module__ == "servelab.backends.onnxruntime"


def test_a_plug_in_that_cannot_import_names_its_extra(site: Path) -> None:
    with pytest.raises(
        Unsupported, match=r"backend 'broken' cannot be imported .*pip install 'echo-plugin\[fast\]'"
    ):
        backend_class("broken")


def test_an_unknown_name_lists_core_and_plug_in_backends(site: Path) -> None:
    with pytest.raises(
        Unsupported, match=r"unknown backend 'nope'; expected one of \[.*'echo'.*'graphsage'.*'onnxruntime'"
    ):
        backend_class("nope")
