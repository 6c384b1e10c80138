"""The ``servelab`` command: serve | bench | compare | convert | select | graph | demo | deploy | check-triton | import
| rollout.

Each sub-command lives in its own module of this package and is registered here. Importing this
package changes nothing in the process (and imports no grpc); :func:`main`, which owns the process,
sets grpcio's start-up switches before any command runs.
"""

from __future__ import annotations

import typer

from servelab.cli import bench as _bench
from servelab.cli import check_triton as _check_triton
from servelab.cli import compare as _compare
from servelab.cli import convert as _convert
from servelab.cli import demo as _demo
from servelab.cli import deploy as _deploy
from servelab.cli import graph as _graph
from servelab.cli import import_ as _import
from servelab.cli import rollout as _rollout
from servelab.cli import select as _select
from servelab.cli import serve as _serve
from servelab.config.grpc_runtime import CLIENT_EXPERIMENTS, SERVER_EXPERIMENTS, disable_grpc_experiments
from servelab.config.numpy_runtime import disable_numpy_hugepages
from servelab.config.signals import exit_on_sigterm

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
_deploy.register(app)
_check_triton.register(app)
app.add_typer(_graph.app, name="graph", help="GraphSAGE: build, synthesise, train and export graphs and models.")
_import.register(app)
app.add_typer(_rollout.app, name="rollout", help="Release safely: shadow -> staged canary with live gates -> promote.")


def main() -> None:
    """The ``servelab`` executable (and ``python -m servelab.cli``)."""
    # Before any command imports grpc: servers and clients of this process skip grpcio's EventEngine
    # thread hops (measured in servelab.config.grpc_runtime).
    disable_grpc_experiments(SERVER_EXPERIMENTS + CLIENT_EXPERIMENTS)
    disable_numpy_hugepages()  # no GIL-held memory compaction in large arrays (servelab.config.numpy_runtime)
    exit_on_sigterm()  # a SIGTERM'd compare/bench/select stops the servers it started (`serve` installs its own)
    app()


__all__ = ["app", "main"]
