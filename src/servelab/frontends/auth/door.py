"""The door: what each API group requires of a request, decided once at start, checked once per request.

:func:`build_door` turns the settings into a :class:`Door` (loading the keys, refusing an exposed server
without a management key); ``door.http`` / ``door.grpc`` hold a :class:`Requirement` only for the groups
that need something, so an open group costs nothing per request and a door with nothing to check
installs nothing at all. ``Requirement.check`` takes a header getter, so REST and gRPC share it; every
secret comparison is :func:`hmac.compare_digest`.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from servelab.config.settings import ApiGroup, Restriction, ServerSettings
from servelab.frontends.auth.keys import AuthSetupError, Keys, load_keys
from servelab.frontends.auth.routes import LEVEL, Level

__all__ = ["GRPC_RESTRICTED_PREFIX", "Denial", "Door", "Requirement", "build_door", "is_loopback"]

log = logging.getLogger("servelab.auth")

#: Triton sends a restricted protocol's header over gRPC as metadata with this prefix.
GRPC_RESTRICTED_PREFIX = "triton-grpc-protocol-"

HeaderGetter = Callable[[str], str | None]


@dataclass(frozen=True)
class Denial:
    """Why a request is refused. ``restricted``: a Triton restricted-API header; otherwise a bearer key."""

    message: str
    restricted: bool = False
    invalid_token: bool = False  #: a key was sent but it is not the right one


def _as_bytes(text: str) -> bytes:
    return text.encode("utf-8", "backslashreplace")


@dataclass(frozen=True)
class Requirement:
    """What one API group needs: one of ``keys`` as a bearer token, and/or header ``header`` = ``value``."""

    group: ApiGroup
    level: Level
    keys: tuple[bytes, ...] = ()
    header: str | None = None
    value: bytes = b""
    restricted_message: str = ""

    def check(self, get: HeaderGetter) -> Denial | None:
        """``None`` if the request may pass; ``get(name)`` returns a header (lower-case name) or None."""
        if self.keys:
            denial = self._check_key(get("authorization"))
            if denial is not None:
                return denial
        if self.header is not None:
            sent = get(self.header)
            if sent is None or not hmac.compare_digest(_as_bytes(sent), self.value):
                return Denial(self.restricted_message, restricted=True)
        return None

    def _check_key(self, authorization: str | None) -> Denial | None:
        needs = f"the {self.group.value} API needs the {self.level.value} key"
        if authorization is None:
            return Denial(f"{needs}: send the header 'Authorization: Bearer <key>'")
        scheme, _, token = authorization.strip().partition(" ")
        presented = _as_bytes(token.strip())
        matched = False
        for key in self.keys:
            matched |= hmac.compare_digest(presented, key)
        if scheme.lower() != "bearer" or not matched:
            return Denial(f"{needs}: the key sent in 'Authorization: Bearer' is not valid", invalid_token=True)
        return None


@dataclass(frozen=True)
class Door:
    """Requirements per API group for the HTTP ports and the gRPC port (absent group = open)."""

    keys: Keys = field(default_factory=Keys)
    http: dict[ApiGroup, Requirement] = field(default_factory=dict)
    grpc: dict[ApiGroup, Requirement] = field(default_factory=dict)

    def summary(self) -> str:
        """One log line: which groups need what (never a key)."""
        parts = []
        for name, table in (("http", self.http), ("grpc", self.grpc)):
            for group, req in table.items():
                needs = [f"{req.level.value} key"] if req.keys else []
                needs += [f"header {req.header!r}"] if req.header else []
                parts.append(f"{name} {group.value}: {' + '.join(needs)}")
        return "; ".join(parts) if parts else "every API is open"


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` listens on loopback only (an unresolved name other than localhost: no)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def build_door(settings: ServerSettings) -> Door:
    """The door for these settings; raises :class:`AuthSetupError` when the server must not start."""
    auth = settings.auth
    keys = Keys() if auth.disable_auth else load_keys(auth)
    exposed = not is_loopback(settings.host)
    if exposed and keys.management is None and not auth.disable_auth:
        raise AuthSetupError(_exposure_message(settings.host))
    if exposed and auth.disable_auth:
        log.warning("auth disabled while listening on %s: repository control and TorchServe management "
                    "are open to anyone who reaches the ports", settings.host)
    door = Door(
        keys=keys,
        http=_requirements(keys, auth.http_restricted_api, "", "This API is restricted"),
        grpc=_requirements(keys, auth.grpc_restricted_protocol, GRPC_RESTRICTED_PREFIX, "This protocol is restricted"),
    )
    log.info("auth: %s", door.summary())
    return door


def _exposure_message(host: str) -> str:
    return (
        f"refusing to start: --host {host} listens beyond loopback and no management key is configured, so "
        "repository control (load/unload) and TorchServe management would be open to the network. Pass "
        "--key-file PATH (keys are generated there if the file does not exist), --management-key KEY (or "
        "SERVELAB_AUTH__MANAGEMENT_KEY), or --disable-auth to serve without keys on purpose"
    )


def _accepted_keys(keys: Keys, level: Level) -> tuple[bytes, ...]:
    if level is Level.MANAGEMENT and keys.management:
        return (_as_bytes(keys.management),)
    if level is Level.INFERENCE and keys.inference:
        return tuple(_as_bytes(k) for k in (keys.inference, keys.management) if k)
    return ()


def _requirements(
    keys: Keys, restrictions: list[Restriction], prefix: str, restricted: str
) -> dict[ApiGroup, Requirement]:
    headers = {api: (prefix + r.key, r.value.get_secret_value()) for r in restrictions for api in r.apis}
    table: dict[ApiGroup, Requirement] = {}
    for group, level in LEVEL.items():
        accepted = _accepted_keys(keys, level)
        header, value = headers.get(group, (None, ""))
        if not accepted and header is None:
            continue
        message = f"{restricted}, expecting header '{header}'" if header else ""
        table[group] = Requirement(group, level, accepted, header, _as_bytes(value), message)
    return table
