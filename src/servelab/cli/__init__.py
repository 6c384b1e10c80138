"""The ``servelab`` command: serve | bench | compare | convert | select | graph | demo.

Each sub-command lives in its own module of this package and is registered here.
"""

from __future__ import annotations

from servelab.config.grpc_runtime import CLIENT_EXPERIMENTS, SERVER_EXPERIMENTS, disable_grpc_experiments

# First thing, before any module imports grpc: servers and clients of this process skip grpcio's
# EventEngine thread hops (measured in servelab.config.grpc_runtime).
disable_grpc_experiments(SERVER_EXPERIMENTS + CLIENT_EXPERIMENTS)

import typer  # noqa: E402

from servelab.cli import bench as _bench  # noqa: E402
from servelab.cli import compare as _compare  # noqa: E402
from servelab.cli import convert as _convert  # noqa: E402
from servelab.cli import demo as _demo  # noqa: E402
from servelab.cli import graph as _graph  # noqa: E402
from servelab.cli import select as _select  # noqa: E402
from servelab.cli import serve as _serve  # noqa: E402

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="servelab: serve models over the Open Inference Protocol and measure which runtime meets your SLA.",
)
_serve.register(app)
_demo.register(app)
_bench.register(app)
_compare.register(app)
_convert.register(app)
_select.register(app)
app.add_typer(_graph.app, name="graph", help="GraphSAGE: build, synthesise, train and export graphs and models.")


def main() -> None:
    app()


__all__ = ["app", "main"]
