"""`servelab serve REPO [REPO...]`: every front-end on one event loop, with Triton's flag names.

Precedence: flags > ``--settings FILE`` (JSON) > SERVELAB_* environment variables > defaults.
Exit status: 0 after a clean SIGTERM/SIGINT, 2 for bad settings or a port that cannot be bound.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

__all__ = ["build_settings", "register", "serve"]


def build_settings(repositories: list[Path], settings_file: Path | None, **flags: Any) -> Any:
    """ServerSettings from a settings file and flags (None flags keep the file's or default value)."""
    from servelab.config.settings import ServerSettings

    overrides: dict[str, Any] = {k: v for k, v in flags.items() if v is not None and k != "limits"}
    limits = {k: v for k, v in (flags.get("limits") or {}).items() if v is not None}
    if repositories:
        overrides["model_repository"] = [str(p) for p in repositories]
    settings = ServerSettings.from_file(settings_file, **overrides)
    if limits:
        merged = settings.limits.model_dump() | limits
        settings = ServerSettings.from_file(settings_file, **overrides, limits=merged)
    return settings


def serve(
    repositories: Annotated[list[Path], typer.Argument(help="Model repository folders.", show_default=False)],
    http_port: Annotated[int | None, typer.Option("--http-port", help="OIP REST, TF Serving, TorchServe inference [8000]; 0 = free port.")] = None,
    grpc_port: Annotated[int | None, typer.Option("--grpc-port", help="OIP gRPC [8001].")] = None,
    metrics_port: Annotated[int | None, typer.Option("--metrics-port", help="Prometheus /metrics [8002].")] = None,
    management_port: Annotated[int | None, typer.Option("--management-port", help="TorchServe management API [8081].")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Address to bind [127.0.0.1].")] = None,
    model_control_mode: Annotated[str | None, typer.Option("--model-control-mode", help="none | explicit | poll.")] = None,
    load_model: Annotated[list[str] | None, typer.Option("--load-model", help="Model to load at start (repeatable; '*' = all).")] = None,
    repository_poll_secs: Annotated[float | None, typer.Option("--repository-poll-secs", help="Poll interval in poll mode.")] = None,
    exit_timeout_s: Annotated[float | None, typer.Option("--exit-timeout-secs", help="How long SIGTERM waits for in-flight requests.")] = None,
    max_body_bytes: Annotated[int | None, typer.Option("--max-body-bytes", help="Largest request body (413 above).")] = None,
    request_timeout_s: Annotated[float | None, typer.Option("--request-timeout-s", help="Server-side time limit per request.")] = None,
    max_tensor_elements: Annotated[int | None, typer.Option("--max-tensor-elements", help="Largest element count of one input tensor.")] = None,
    max_tensor_rank: Annotated[int | None, typer.Option("--max-tensor-rank", help="Most dimensions of one input tensor [32].")] = None,
    offload_decode_bytes: Annotated[int | None, typer.Option("--offload-decode-bytes", help="Bodies above this decode in a worker thread [1 MiB].")] = None,
    http_header_timeout_s: Annotated[float | None, typer.Option("--http-header-timeout-s", help="Time to send request headers; 408 after [10].")] = None,
    http_keep_alive_timeout_s: Annotated[int | None, typer.Option("--http-keep-alive-timeout-s", help="Idle keep-alive seconds [30].")] = None,
    http_max_connections: Annotated[int | None, typer.Option("--http-max-connections", help="Open connections per HTTP port; 503 past it [1000].")] = None,
    http_max_header_bytes: Annotated[int | None, typer.Option("--http-max-header-bytes", help="Request line + headers; 431 past it [64 KiB].")] = None,
    grpc_max_concurrent_streams: Annotated[int | None, typer.Option("--grpc-max-concurrent-streams", help="Concurrent gRPC calls per connection [1000].")] = None,
    grpc_max_error_bytes: Annotated[int | None, typer.Option("--grpc-max-error-bytes", help="Longest gRPC error message [2048].")] = None,
    settings_file: Annotated[Path | None, typer.Option("--settings", help="JSON settings file.")] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="debug | info | warning | error.")] = "info",
) -> None:
    """Serve the models in REPO over OIP REST + gRPC, TF Serving REST and TorchServe's APIs."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = build_settings(
            repositories,
            settings_file,
            http_port=http_port,
            grpc_port=grpc_port,
            metrics_port=metrics_port,
            management_port=management_port,
            host=host,
            model_control_mode=model_control_mode,
            load_models=load_model or None,
            repository_poll_secs=repository_poll_secs,
            exit_timeout_s=exit_timeout_s,
            limits={
                "max_body_bytes": max_body_bytes, "request_timeout_s": request_timeout_s,
                "max_tensor_elements": max_tensor_elements, "max_tensor_rank": max_tensor_rank,
                "offload_decode_bytes": offload_decode_bytes, "http_header_timeout_s": http_header_timeout_s,
                "http_keep_alive_timeout_s": http_keep_alive_timeout_s, "http_max_connections": http_max_connections,
                "http_max_header_bytes": http_max_header_bytes,
                "grpc_max_concurrent_streams": grpc_max_concurrent_streams, "grpc_max_error_bytes": grpc_max_error_bytes,
            },
        )
    except (ValidationError, ValueError) as exc:
        typer.echo(f"error: invalid settings: {exc}", err=True)
        raise typer.Exit(code=2) from None
    missing = [str(p) for p in settings.model_repository if not Path(p).is_dir()]
    if missing:
        typer.echo(f"error: model repository folder(s) not found: {', '.join(missing)}", err=True)
        raise typer.Exit(code=2)

    import uvloop

    from servelab.frontends.server import Server

    try:
        uvloop.run(Server(settings).serve())
    except OSError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from None


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("serve")(serve)
