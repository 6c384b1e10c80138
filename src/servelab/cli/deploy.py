"""`servelab deploy ray REPO` and `servelab deploy k8s REPO`: the repository on more than one machine.

Both read the same settings as `servelab serve` (``--settings FILE``, SERVELAB_* variables, flags) and
its ``deploy`` section. Exit status 2 for settings, a repository or keys that cannot be used.
"""

from __future__ import annotations

import importlib.util
import logging
import signal
import threading
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from servelab.errors import ServelabError

__all__ = ["app", "register"]

app = typer.Typer(no_args_is_help=True, help="More than one machine: Ray Serve, Kubernetes and KServe.")

_Repo = Annotated[Path, typer.Argument(help="Model repository folder.", show_default=False)]
_Settings = Annotated[Path | None, typer.Option("--settings", help="JSON settings file (its `deploy` section).")]
_KeyFile = Annotated[Path | None, typer.Option("--key-file", help="TorchServe-style key_file.json; generated (0600) if absent.")]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=2)


def _settings(repo: Path, settings_file: Path | None, **flags: Any) -> Any:
    from servelab.cli.serve import build_settings

    if not repo.is_dir():
        raise _fail(f"model repository folder not found: {repo}")
    try:
        return build_settings([repo], settings_file, **flags)
    except (ValidationError, ValueError) as exc:
        raise _fail(f"invalid settings: {exc}") from None


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


@app.command("ray")
def ray_command(
    repository: _Repo,
    address: Annotated[str | None, typer.Option("--address", help="Ray cluster to join (auto, ray://host:10001); default: start a local Ray and serve until SIGINT/SIGTERM.")] = None,
    model: Annotated[list[str] | None, typer.Option("--model", help="Deploy only this model (repeatable).")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Address of Ray Serve's HTTP proxy [127.0.0.1].")] = None,
    http_port: Annotated[int | None, typer.Option("--http-port", help="Port of Ray Serve's HTTP proxy [8000].")] = None,
    key_file: _KeyFile = None,
    settings_file: _Settings = None,
    log_level: Annotated[str, typer.Option("--log-level", help="debug | info | warning | error.")] = "info",
) -> None:
    """Every model of REPO as a Ray Serve application running servelab's data plane, behind the OIP REST API."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if importlib.util.find_spec("ray") is None:
        raise _fail("`servelab deploy ray` needs the ray extra (ray not installed): pip install 'servelab[ray]'")
    settings = _settings(repository, settings_file, host=host, http_port=http_port, auth={"key_file": key_file})
    from servelab.deploy import ray_deploy
    from servelab.frontends.auth import AuthSetupError

    try:
        deployed = ray_deploy.deploy(settings, address=address, models=model or None)
    except (AuthSetupError, ServelabError) as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"servelab on Ray Serve at {deployed.http_url}: {', '.join(deployed.models)}")
    if address is None:
        _wait_for_signal()
        ray_deploy.shutdown()


@app.command("k8s")
def k8s_command(
    repository: _Repo,
    out: Annotated[Path, typer.Option("--out", help="Folder for the manifests and the Dockerfile.")] = Path("deploy/k8s"),
    context: Annotated[Path, typer.Option("--context", help="Docker build context: a servelab checkout that holds REPO.")] = Path("."),
    image: Annotated[str | None, typer.Option("--image", help="Image of the pods [servelab:0.1.0].")] = None,
    namespace: Annotated[str | None, typer.Option("--namespace", help="Namespace of every object [servelab].")] = None,
    key_file: _KeyFile = None,
    settings_file: _Settings = None,
) -> None:
    """Kubernetes manifests (Deployment, Service, HPA, ServiceMonitor, NetworkPolicy, key Secret), a KServe
    ServingRuntime + InferenceService, and the server image's Dockerfile."""
    settings = _settings(repository, settings_file, auth={"key_file": key_file})
    given = {k: v for k, v in {"image": image, "namespace": namespace}.items() if v is not None}
    if given:
        from servelab.config.settings import KubernetesSettings

        try:
            kube = KubernetesSettings(**(settings.deploy.kubernetes.model_dump() | given))
        except ValidationError as exc:
            raise _fail(f"invalid settings: {exc}") from None
        settings = settings.model_copy(update={"deploy": settings.deploy.model_copy(update={"kubernetes": kube})})
    from servelab.deploy.write import write_manifests

    try:
        written = write_manifests(settings, out, context)
    except (ServelabError, ValueError) as exc:
        raise _fail(str(exc)) from None
    for path in written:
        typer.echo(str(path))


def register(root: typer.Typer) -> None:
    """Add `servelab deploy ...` to the root app."""
    root.add_typer(app, name="deploy")
