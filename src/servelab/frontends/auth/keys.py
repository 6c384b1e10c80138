"""The management and inference keys: from settings (flags, environment, settings file) or a key file.

The key file is TorchServe's ``key_file.json`` shape, ``{"management": {"key": ...}, "inference":
{"key": ...}}`` (other fields, such as TorchServe's ``"expiration time"`` or ``"API"``, are ignored).
When ``auth.key_file`` names a file that does not exist, both keys are generated (``secrets``, 32 bytes
each) and written there with mode 0600, created exclusively so an existing file is never overwritten.
The log names the file's path, never a key. Keys do not expire and the file is kept after shutdown, so
clients keep working across restarts.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.config.settings import AuthSettings

__all__ = ["AuthSetupError", "Keys", "generate_key_file", "load_keys", "read_key_file"]

log = logging.getLogger("servelab.auth")

_KINDS = ("management", "inference")


class AuthSetupError(ValueError):
    """Authentication or TLS cannot be set up as configured: the server must not start."""


@dataclass(frozen=True)
class Keys:
    """The keys in force; ``None`` means that level has no key."""

    management: str | None = None
    inference: str | None = None


def load_keys(auth: AuthSettings) -> Keys:
    """The keys the settings configure, reading (or generating) the key file when one is named."""
    if auth.key_file is None:
        return Keys(
            management=auth.management_key.get_secret_value() if auth.management_key else None,
            inference=auth.inference_key.get_secret_value() if auth.inference_key else None,
        )
    path = Path(auth.key_file)
    if path.exists():
        return read_key_file(path)
    keys = generate_key_file(path)
    log.info("generated the management and inference keys into %s (mode 0600); clients send "
             "'Authorization: Bearer <key>'", path.resolve())
    return keys


def read_key_file(path: Path) -> Keys:
    """Keys from a TorchServe-style key file; a file others may read is used, with a warning."""
    try:
        mode = path.stat().st_mode
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AuthSetupError(f"key file {path}: cannot read it as JSON: {exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("key file %s can be read by other users (mode %o); chmod 600 it", path, stat.S_IMODE(mode))
    if not isinstance(data, dict):
        raise AuthSetupError(f"key file {path}: expected a JSON object with 'management' and/or 'inference'")
    found = {kind: _key_of(data, kind, path) for kind in _KINDS}
    if not any(found.values()):
        raise AuthSetupError(f"key file {path}: holds neither a 'management' nor an 'inference' key")
    log.info("read the %s key(s) from %s", " and ".join(k for k, v in found.items() if v), path.resolve())
    return Keys(**found)


def _key_of(data: dict[str, Any], kind: str, path: Path) -> str | None:
    entry = data.get(kind)
    if entry is None:
        return None
    key = entry.get("key") if isinstance(entry, dict) else None
    if not isinstance(key, str) or not key or not key.isascii() or not key.isprintable() or " " in key:
        raise AuthSetupError(f"key file {path}: '{kind}' must be an object whose 'key' is a non-empty ASCII string")
    return key


def generate_key_file(path: Path) -> Keys:
    """Write fresh keys to ``path`` (which must not exist yet), readable by this user only."""
    keys = Keys(management=secrets.token_urlsafe(32), inference=secrets.token_urlsafe(32))
    body = json.dumps({kind: {"key": getattr(keys, kind)} for kind in _KINDS}, indent=2) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise AuthSetupError(f"key file {path}: cannot create it: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(body)
    os.chmod(path, 0o600)  # the umask may have narrowed it further, never widened; make it exact
    return keys
