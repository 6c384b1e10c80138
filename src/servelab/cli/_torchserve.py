"""``servelab serve --torchserve-config config.properties`` (or a model store folder): TorchServe's settings
as servelab's.

TorchServe's keys become what servelab's flags would set: ``inference_address`` -> host and HTTP port,
``management_address`` -> management port, ``metrics_address`` -> metrics port, the gRPC addresses ->
TorchServe's two gRPC ports, ``default_response_timeout`` -> the request timeout, ``max_request_size``
-> the body limit; the store, ``load_models``, ``models`` and ``default_workers_per_model`` -> the
``torchserve`` settings. Flags given on the command line win. Token authorisation is on unless
``disable_token_authorization=true`` or ``--disable-token-auth``: as TorchServe, servelab then uses
``key_file.json`` in the current folder (read when it exists, else generated with mode 0600).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab.repository.torchserve_properties import TorchServeProperties, parse_properties, read_properties

__all__ = ["TorchServeSetup", "apply", "split_models", "torchserve_setup"]

log = logging.getLogger("servelab.torchserve")

KEY_FILE = "key_file.json"


@dataclass
class TorchServeSetup:
    """Flag values (None = TorchServe says nothing) and the ``torchserve`` settings group."""

    flags: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)
    torchserve: dict[str, Any] = field(default_factory=dict)
    token_auth: bool = True


def split_models(arguments: list[Path], models: list[str] | None) -> tuple[list[Path], list[str] | None]:
    """TorchServe's ``--models a=a.mar b=b.mar`` takes several values; after the first, click hands them
    over as positional arguments. With a model store, those that name archives are models."""
    def is_model(text: str) -> bool:
        return text == "all" or "=" in text or text.endswith((".mar", ".tar.gz", ".model"))

    extra = [str(a) for a in arguments if is_model(str(a))]
    rest = [a for a in arguments if not is_model(str(a))]
    return rest, [*(models or []), *extra] if extra or models else None


def _properties(config: Path) -> TorchServeProperties:
    if config.is_dir():  # a model store folder: TorchServe's defaults, every model loaded
        return parse_properties(f"model_store={config}\nload_models=all\n", Path.cwd(), source=str(config))
    return read_properties(config)


def torchserve_setup(config: Path | None, model_store: Path | None, models: list[str] | None,
                     enable_model_api: bool, disable_token_auth: bool) -> TorchServeSetup:
    """What a TorchServe config (or store folder) and TorchServe's own flags ask of servelab."""
    props = _properties(config) if config is not None else parse_properties("", Path.cwd(), source="--model-store")
    if props.ignored:
        log.info("%s: keys servelab does not use: %s", props.source, ", ".join(props.ignored))
    inference = props.address("inference_address")
    hosts = {inference.host, props.address("management_address").host, props.address("metrics_address").host}
    if len(hosts) > 1:
        log.warning("%s: the addresses name hosts %s; servelab binds every port on %s", props.source, sorted(hosts),
                    inference.host)
    store = model_store.resolve() if model_store is not None else props.model_store
    load = [m.strip() for item in models for m in item.split(",") if m.strip()] if models else props.load_models
    setup = TorchServeSetup()
    setup.flags = {
        "host": inference.host, "http_port": inference.port,
        "management_port": props.address("management_address").port,
        "metrics_port": props.address("metrics_address").port,
    }  # fmt: skip
    setup.limits = {"request_timeout_s": float(props.integer("default_response_timeout")),
                    "max_body_bytes": props.integer("max_request_size")}  # fmt: skip
    setup.torchserve = {
        "config_file": config, "model_store": store, "load_models": load, "models": props.models(),
        "default_workers": props.default_workers or None,
        "default_response_timeout_s": props.integer("default_response_timeout"),
        "enable_model_api": enable_model_api or props.flag("enable_model_api"),
        "grpc_inference_port": props.grpc_address("inference").port,
        "grpc_management_port": props.grpc_address("management").port,
        "service_envelope": props.values.get("service_envelope") or None,
    }  # fmt: skip
    setup.token_auth = not (disable_token_auth or props.flag("disable_token_authorization"))
    return setup


def apply(setup: TorchServeSetup, flags: dict[str, Any]) -> dict[str, Any]:
    """``flags`` (the command line's; None = not given) completed with TorchServe's values."""
    out = dict(flags)
    for key, value in setup.flags.items():
        if out.get(key) is None:
            out[key] = value
    limits = dict(out.get("limits") or {})
    for key, value in setup.limits.items():
        if limits.get(key) is None:
            limits[key] = value
    out["limits"] = limits
    auth = dict(out.get("auth") or {})
    keys_given = any(auth.get(k) is not None for k in ("management_key", "inference_key", "key_file"))
    if not auth.get("disable_auth") and not keys_given:
        if setup.token_auth:
            auth["key_file"] = Path(KEY_FILE).resolve()
        else:
            auth["disable_auth"] = True
    out["auth"] = auth
    out["torchserve"] = {**setup.torchserve, **{k: v for k, v in (out.get("torchserve") or {}).items() if v is not None}}
    return out
