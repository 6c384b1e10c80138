"""`servelab serve REPO [REPO...]` (or Triton's `--model-repository REPO`, repeatable): every front-end on
one event loop, with Triton's flag names.

Precedence: flags > SERVELAB_* environment variables > ``--settings FILE`` (JSON) > defaults.
Exit status: 0 after a clean SIGTERM/SIGINT, 2 for bad settings or a port that cannot be bound.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import SecretStr, ValidationError

from servelab.errors import ServelabError

__all__ = ["build_settings", "register", "serve"]

#: settings groups whose flags merge into the file's / environment's values instead of replacing them
_NESTED = ("limits", "auth", "tls", "tfserving", "routing", "torchserve")


def build_settings(repositories: list[Path], settings_file: Path | None, **flags: Any) -> Any:
    """ServerSettings from a settings file and flags (None flags keep the file's or default value)."""
    from servelab.config.settings import ServerSettings

    overrides: dict[str, Any] = {k: v for k, v in flags.items() if v is not None and k not in _NESTED}
    nested = {name: {k: v for k, v in (flags.get(name) or {}).items() if v is not None} for name in _NESTED}
    if repositories:
        overrides["model_repository"] = [str(p) for p in repositories]
    settings = ServerSettings.from_file(settings_file, **overrides)
    merged = {name: getattr(settings, name).model_dump() | given for name, given in nested.items() if given}
    if merged:
        settings = ServerSettings.from_file(settings_file, **overrides, **merged)
    return settings


def _auto_complete(strict: str | None, disable: bool) -> bool | None:
    """The auto_complete_config setting from Triton's two flags (None: neither given)."""
    if strict is not None and strict.strip().lower() not in ("true", "false", "1", "0"):
        raise typer.BadParameter(f"--strict-model-config takes true or false, got {strict!r}")
    if disable or (strict is not None and strict.strip().lower() in ("true", "1")):
        return False
    return None if strict is None else True


def _secret(value: str | None) -> SecretStr | None:
    """Keys travel as SecretStr, so a settings error elsewhere in ``auth`` cannot print them."""
    return SecretStr(value) if value is not None else None


def serve(
    repositories: Annotated[list[Path] | None, typer.Argument(help="Model repository folders (or --model-repository, or --tfserving-config).", show_default=False)] = None,
    model_repository: Annotated[list[Path] | None, typer.Option("--model-repository", "--model-store", help="Model repository folder, Triton's flag (repeatable; adds to the folders given as arguments).")] = None,
    http_port: Annotated[int | None, typer.Option("--http-port", help="OIP REST, TF Serving, TorchServe inference [8000]; 0 = free port.")] = None,
    grpc_port: Annotated[int | None, typer.Option("--grpc-port", help="OIP gRPC [8001].")] = None,
    metrics_port: Annotated[int | None, typer.Option("--metrics-port", help="Prometheus /metrics [8002].")] = None,
    management_port: Annotated[int | None, typer.Option("--management-port", help="TorchServe management API [8081].")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Address to bind [127.0.0.1].")] = None,
    model_control_mode: Annotated[str | None, typer.Option("--model-control-mode", help="none | explicit | poll.")] = None,
    load_model: Annotated[list[str] | None, typer.Option("--load-model", help="Model to load at start (repeatable; '*' = all).")] = None,
    repository_poll_secs: Annotated[float | None, typer.Option("--repository-poll-secs", help="Poll interval in poll mode.")] = None,
    strict_readiness: Annotated[str | None, typer.Option("--strict-readiness", help="true | false: ready only when every start-up model loaded (Triton's flag) [true].")] = None,
    server_name: Annotated[str | None, typer.Option("--server-name", help="Name in server metadata; 'triton' for clients that check for it [servelab].")] = None,
    processes: Annotated[int | None, typer.Option("--processes", help="Server processes sharing the ports (SO_REUSEPORT), each with its own models; statistics and model control stay one server's [1].")] = None,
    exit_timeout_s: Annotated[float | None, typer.Option("--exit-timeout-secs", help="How long SIGTERM waits for in-flight requests.")] = None,
    max_body_bytes: Annotated[int | None, typer.Option("--max-body-bytes", help="Largest request body (413 above).")] = None,
    request_timeout_s: Annotated[float | None, typer.Option("--request-timeout-s", help="Server-side time limit per request.")] = None,
    management_key: Annotated[str | None, typer.Option("--management-key", help="Bearer key for repository control and TorchServe management (prefer SERVELAB_AUTH__MANAGEMENT_KEY or --key-file: flags show in ps).")] = None,
    inference_key: Annotated[str | None, typer.Option("--inference-key", help="Bearer key for inference, metadata, config, statistics.")] = None,
    key_file: Annotated[Path | None, typer.Option("--key-file", help="TorchServe-style key_file.json; generated (0600) if it does not exist.")] = None,
    disable_auth: Annotated[bool, typer.Option("--disable-auth", help="Serve without keys even beyond loopback.")] = False,
    http_restricted_api: Annotated[list[str] | None, typer.Option("--http-restricted-api", help="Triton's <api>[,<api>...]:<header>=<value> (repeatable).")] = None,
    grpc_restricted_protocol: Annotated[list[str] | None, typer.Option("--grpc-restricted-protocol", help="Triton's <protocol>[,...]:<key>=<value>; metadata triton-grpc-protocol-<key> (repeatable).")] = None,
    ssl_certfile: Annotated[Path | None, typer.Option("--ssl-certfile", help="PEM certificate: HTTPS on every HTTP port.")] = None,
    ssl_keyfile: Annotated[Path | None, typer.Option("--ssl-keyfile", help="PEM private key of --ssl-certfile.")] = None,
    ssl_ca_certs: Annotated[Path | None, typer.Option("--ssl-ca-certs", help="PEM CA: HTTP clients must present a certificate it signed (mutual TLS).")] = None,
    grpc_use_ssl: Annotated[str | None, typer.Option("--grpc-use-ssl", help="true | false: gRPC over TLS (Triton's flag).")] = None,
    grpc_server_cert: Annotated[Path | None, typer.Option("--grpc-server-cert", help="PEM certificate of the gRPC port.")] = None,
    grpc_server_key: Annotated[Path | None, typer.Option("--grpc-server-key", help="PEM private key of --grpc-server-cert.")] = None,
    grpc_root_cert: Annotated[Path | None, typer.Option("--grpc-root-cert", help="PEM CA of gRPC client certificates.")] = None,
    grpc_use_ssl_mutual: Annotated[str | None, typer.Option("--grpc-use-ssl-mutual", help="true | false: require gRPC client certificates.")] = None,
    allow_custom_backends: Annotated[bool, typer.Option("--allow-custom-backends", help="Allow `backend: \"module:Class\"` in configs (imports that module).")] = False,
    strict_model_config: Annotated[str | None, typer.Option("--strict-model-config", help="true: no auto-complete, config.pbtxt must be complete (Triton's flag; = --disable-auto-complete-config).")] = None,
    disable_auto_complete_config: Annotated[bool, typer.Option("--disable-auto-complete-config", help="Read nothing from model files; configs must state inputs, outputs, max_batch_size.")] = False,
    max_tensor_elements: Annotated[int | None, typer.Option("--max-tensor-elements", help="Largest element count of one input tensor.")] = None,
    max_tensor_rank: Annotated[int | None, typer.Option("--max-tensor-rank", help="Most dimensions of one input tensor [32].")] = None,
    offload_decode_bytes: Annotated[int | None, typer.Option("--offload-decode-bytes", help="Bodies above this decode in a worker thread [1 MiB].")] = None,
    http_header_timeout_s: Annotated[float | None, typer.Option("--http-header-timeout-s", help="Time to send request headers; 408 after [10].")] = None,
    http_keep_alive_timeout_s: Annotated[int | None, typer.Option("--http-keep-alive-timeout-s", help="Idle keep-alive seconds [30].")] = None,
    http_max_connections: Annotated[int | None, typer.Option("--http-max-connections", help="Open connections per HTTP port; 503 past it [1000].")] = None,
    http_max_header_bytes: Annotated[int | None, typer.Option("--http-max-header-bytes", help="Request line + headers; 431 past it [64 KiB].")] = None,
    grpc_door: Annotated[str | None, typer.Option("--grpc-door", help="h2 | grpcio: what serves the gRPC port; grpcio also takes gzip-compressed messages [h2].")] = None,
    grpc_max_concurrent_streams: Annotated[int | None, typer.Option("--grpc-max-concurrent-streams", help="Concurrent gRPC calls per connection [1000].")] = None,
    grpc_max_error_bytes: Annotated[int | None, typer.Option("--grpc-max-error-bytes", help="Longest gRPC error message [2048].")] = None,
    tfserving_config: Annotated[Path | None, typer.Option("--tfserving-config", "--model_config_file", help="Serve a TF Serving ModelServerConfig (models.config) instead of a repository.")] = None,
    tfserving_config_poll: Annotated[float | None, typer.Option("--model-config-file-poll-wait-seconds", "--model_config_file_poll_wait_seconds", help="Re-read the TF Serving config this often [0 = never].")] = None,
    tfserving_file_poll: Annotated[float | None, typer.Option("--file-system-poll-wait-seconds", "--file_system_poll_wait_seconds", help="Look for new version folders this often [1; 0 = at start only].")] = None,
    tfserving_batching: Annotated[bool, typer.Option("--enable-batching", "--enable_batching", help="TF Serving batching for every batching signature.")] = False,
    tfserving_batching_file: Annotated[Path | None, typer.Option("--batching-parameters-file", "--batching_parameters_file", help="TF Serving BatchingParameters file (implies --enable-batching).")] = None,
    routing_state: Annotated[Path | None, typer.Option("--routing-state", help="sqlite file keeping rollouts, default versions and their audit log across restarts [in memory].")] = None,
    torchserve_config: Annotated[Path | None, typer.Option("--torchserve-config", "--ts-config", help="Serve a TorchServe config.properties (or a model store folder) instead of a repository.")] = None,
    model_store: Annotated[Path | None, typer.Option("--model-store", help="TorchServe model store (.mar, .tar.gz, model folders); overrides config.properties.")] = None,
    models: Annotated[list[str] | None, typer.Option("--models", help="TorchServe's --models: 'all' or [name=]archive (repeatable, or comma-separated).")] = None,
    enable_model_api: Annotated[bool, typer.Option("--enable-model-api", help="TorchServe: allow register/unregister through the management API.")] = False,
    disable_token_auth: Annotated[bool, typer.Option("--disable-token-auth", help="TorchServe: serve without key_file.json tokens.")] = False,
    grpc_inference_port: Annotated[int | None, typer.Option("--grpc-inference-port", help="TorchServe gRPC inference port [7070 with a store].")] = None,
    grpc_management_port: Annotated[int | None, typer.Option("--grpc-management-port", help="TorchServe gRPC management port [7071 with a store].")] = None,
    _ncs: Annotated[bool, typer.Option("--ncs", hidden=True, help="TorchServe's no-config-snapshot flag (servelab keeps none).")] = False,
    settings_file: Annotated[Path | None, typer.Option("--settings", help="JSON settings file.")] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="debug | info | warning | error.")] = "info",
) -> None:
    """Serve the models in REPO over OIP REST + gRPC, TF Serving REST and TorchServe's APIs."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        flags = dict(
            http_port=http_port,
            grpc_port=grpc_port,
            grpc_door=grpc_door,
            metrics_port=metrics_port,
            management_port=management_port,
            host=host,
            model_control_mode=model_control_mode,
            load_models=load_model or None,
            repository_poll_secs=repository_poll_secs,
            strict_readiness=strict_readiness,
            server_name=server_name,
            exit_timeout_s=exit_timeout_s,
            processes=processes,
            allow_custom_backends=allow_custom_backends or None,
            auto_complete_config=_auto_complete(strict_model_config, disable_auto_complete_config),
            limits={
                "max_body_bytes": max_body_bytes, "request_timeout_s": request_timeout_s,
                "max_tensor_elements": max_tensor_elements, "max_tensor_rank": max_tensor_rank,
                "offload_decode_bytes": offload_decode_bytes, "http_header_timeout_s": http_header_timeout_s,
                "http_keep_alive_timeout_s": http_keep_alive_timeout_s, "http_max_connections": http_max_connections,
                "http_max_header_bytes": http_max_header_bytes,
                "grpc_max_concurrent_streams": grpc_max_concurrent_streams, "grpc_max_error_bytes": grpc_max_error_bytes,
            },
            auth={
                "management_key": _secret(management_key), "inference_key": _secret(inference_key), "key_file": key_file,
                "disable_auth": (disable_auth or disable_token_auth) or None, "http_restricted_api": http_restricted_api or None,
                "grpc_restricted_protocol": grpc_restricted_protocol or None,
            },
            tls={
                "ssl_certfile": ssl_certfile, "ssl_keyfile": ssl_keyfile, "ssl_ca_certs": ssl_ca_certs,
                "grpc_use_ssl": grpc_use_ssl, "grpc_server_cert": grpc_server_cert,
                "grpc_server_key": grpc_server_key, "grpc_root_cert": grpc_root_cert,
                "grpc_use_ssl_mutual": grpc_use_ssl_mutual,
            },
            tfserving={
                "config_file": tfserving_config, "config_poll_s": tfserving_config_poll,
                "file_system_poll_s": tfserving_file_poll, "enable_batching": tfserving_batching or None,
                "batching_parameters_file": tfserving_batching_file,
            },
            routing={"state_db": routing_state},
            torchserve={"grpc_inference_port": grpc_inference_port, "grpc_management_port": grpc_management_port},
        )
        folders = [*(repositories or []), *(model_repository or [])]
        if torchserve_config is not None or model_store is not None:
            from servelab.cli._torchserve import apply, split_models, torchserve_setup

            folders, models = split_models(folders, models)

            setup = torchserve_setup(torchserve_config, model_store, models, enable_model_api, disable_token_auth or disable_auth)
            flags = apply(setup, flags)
        settings = build_settings(folders, settings_file, **flags)
    except ServelabError as exc:  # a TorchServe config.properties that cannot be used
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(code=2) from None
    except (ValidationError, ValueError) as exc:
        typer.echo(f"error: invalid settings: {exc}", err=True)
        raise typer.Exit(code=2) from None
    missing = [str(p) for p in settings.model_repository if not Path(p).is_dir()]
    if not settings.model_repository and settings.tfserving.config_file is None and settings.torchserve.model_store is None:
        typer.echo("error: give a model repository folder, --tfserving-config models.config or "
                   "--torchserve-config config.properties (with model_store) / --model-store", err=True)
        raise typer.Exit(code=2)
    if missing:
        typer.echo(f"error: model repository folder(s) not found: {', '.join(missing)}", err=True)
        raise typer.Exit(code=2)

    import uvloop

    from servelab.frontends.server import Server

    try:
        server = Server(settings)
    except ServelabError as exc:  # e.g. a TF Serving config that does not parse
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(code=2) from None
    except ValueError as exc:  # AuthSetupError (keys, TLS), or --processes with what it cannot share
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from None
    try:
        uvloop.run(server.serve())
    except OSError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from None


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("serve")(serve)
