"""What a model name, a version or a file named by a request or a config may be (DESIGN.md, Trust).

Every name a client or a config hands the server passes through here before it reaches the file
system or the importer, so that the rule is written once:

- **Model names** follow Triton's rule: not empty, not ``.``, no ``/``, no ``..``, no NUL. A name is
  a folder of the repository, so anything else could step out of it.
- **Versions** are empty (the newest) or a decimal number.
- **Files** (``default_model_filename``, ``label_filename``, ``file:`` contents of a load request,
  graph store folders, files a graph manifest lists, version folders) are relative names resolved
  inside one folder (the model's own folder, or for shared data the repository), with symlinks and
  ``..`` followed *before* the file is opened; absolute names, NUL and anything that lands outside
  are refused. The model folder itself is whatever the operator put in the repository (a symlinked
  model folder is the operator's choice); nothing below it leaves it.
- **Custom backends** (``backend: "module:Class"``, which imports any module) only when the operator
  turned them on (``allow_custom_backends`` / ``--allow-custom-backends``).
- **Shared-memory keys** (a client's ``register_system_shared_memory`` key) name a POSIX shared-memory
  object: one name (``/name`` or ``name``) that is mapped from :data:`SHM_DIR` only; no further ``/``,
  no ``..``, no NUL, at most 255 bytes, so that a client cannot have the server map any other file.
- **Messages to clients** carry no server paths: :func:`redact` replaces the repository folders in a
  message by names relative to them; the log keeps the full text.

Every refusal is :class:`~servelab.errors.InvalidArgument` naming the field and the rule, never the
server's own paths.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from servelab.errors import InvalidArgument

__all__ = [
    "CUSTOM_BACKEND_FLAG",
    "MODEL_NAME_RULE",
    "PATH_RULE",
    "SHM_DIR",
    "SHM_KEY_RULE",
    "UPLOADABLE_BACKENDS",
    "check_custom_backend",
    "check_model_name",
    "check_shm_key",
    "check_uploadable",
    "check_version",
    "redact",
    "resolve_inside",
    "version_file",
]

MODEL_NAME_RULE = "a model name must not be empty or '.', and must contain no '/', no '..' and no NUL"
PATH_RULE = "a relative path without NUL that stays inside {within} (no absolute path, no '..' or symlink leading out)"
CUSTOM_BACKEND_FLAG = "--allow-custom-backends"
#: Backends whose model files are data that the runtime checks (ONNX Runtime and OpenVINO refuse
#: external weights outside the model's folder); the others run code from their model files
#: (model.py, TorchScript, SavedModel ops, TensorRT plugins), so a load request may not upload them.
UPLOADABLE_BACKENDS = ("onnxruntime", "openvino")
#: where POSIX shared-memory objects live (``shm_open``): the only folder a shared-memory key may name
SHM_DIR = Path("/dev/shm")
SHM_KEY_RULE = (
    "a shared-memory key is one POSIX shared-memory name ('/name' or 'name'): not empty, at most 255 bytes, "
    "no other '/', no '..' and no NUL; it names an object in /dev/shm only"
)
_SHM_NAME_MAX = 255
_SHOWN = 80


def _shown(value: str) -> str:
    """A client-sent value for a message: quoted, and cut when long."""
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 4] + "...'"


def check_model_name(name: str, field: str = "model name") -> str:
    """``name`` when it is a valid model name, else InvalidArgument stating the rule."""
    if not isinstance(name, str) or not name or name == "." or "/" in name or ".." in name or "\0" in name:
        raise InvalidArgument(f"{field} {_shown(str(name))} is not valid: {MODEL_NAME_RULE}")
    return name


def check_version(version: str, field: str = "model version") -> str:
    """``version`` when it is empty (the newest) or a decimal number, else InvalidArgument."""
    if version and not (version.isascii() and version.isdigit()):
        raise InvalidArgument(
            f"{field} {_shown(version)} is not valid: expected a version number such as '1', or none for the newest"
        )
    return version


def check_shm_key(key: str, field: str = "shared-memory key") -> Path:
    """The file in :data:`SHM_DIR` that ``key`` names, else InvalidArgument stating :data:`SHM_KEY_RULE`.

    The caller opens it with ``O_NOFOLLOW`` and checks that it is a regular file: a symlink planted in
    the (world-writable) folder must not lead the server elsewhere.
    """
    name = key.removeprefix("/") if isinstance(key, str) else ""
    if (
        not name
        or name in (".", "..")
        or "/" in name
        or ".." in name
        or "\0" in name
        or len(name.encode("utf-8", errors="replace")) > _SHM_NAME_MAX
    ):
        raise InvalidArgument(f"{field} {_shown(str(key))} is not valid: {SHM_KEY_RULE}")
    return SHM_DIR / name


def resolve_inside(
    folder: Path, name: str, field: str, *, start: Path | None = None, within: str = "the model's folder"
) -> Path:
    """The real path of ``name`` taken from ``start`` (default ``folder``), which must lie inside ``folder``.

    Symlinks and ``..`` are resolved first, so what is checked is what will be opened; the file
    need not exist yet (uploads are written to the path returned).
    """
    rule = PATH_RULE.format(within=within)
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"{field} is empty; expected {rule}")
    if "\0" in name or PurePosixPath(name).is_absolute():
        raise InvalidArgument(f"{field} {_shown(name)} is not allowed; expected {rule}")
    try:
        base = folder.resolve()
        target = ((start if start is not None else folder) / name).resolve()
    except (OSError, RuntimeError):  # a symlink loop
        raise InvalidArgument(f"{field} {_shown(name)} cannot be resolved; expected {rule}") from None
    if target != base and not target.is_relative_to(base):
        raise InvalidArgument(f"{field} {_shown(name)} leads outside {within}; expected {rule}")
    return target


def version_file(version_dir: Path, name: str, field: str) -> Path:
    """A model file named relative to its version folder; it must stay inside the model's folder
    (the version folder's parent, Triton's layout)."""
    return resolve_inside(version_dir.parent, name, field, start=version_dir)


def check_custom_backend(name: str, allowed: bool) -> None:
    """Refuse ``backend: "module:Class"`` unless the operator allowed custom backends."""
    if not allowed:
        raise InvalidArgument(
            f"backend {_shown(name)} names a Python class to import ('module:Class'), and custom backends "
            f"are off; the operator can allow them with {CUSTOM_BACKEND_FLAG} (settings: allow_custom_backends)"
        )


def check_uploadable(backend: str, field: str = "parameters 'file:...'") -> None:
    """Files sent with a load request may only hold models that are data, not code."""
    if backend not in UPLOADABLE_BACKENDS:
        raise InvalidArgument(
            f"{field}: a load request may upload models for the backends {list(UPLOADABLE_BACKENDS)} only; "
            f"a {backend!r} model runs code from its files: put it in the model repository instead"
        )


def redact(message: str, prefixes: Mapping[str, str]) -> str:
    """``message`` with each server folder in ``prefixes`` replaced by its client-side name.

    ``prefixes`` maps a folder (as text) to what a client may read instead (``""`` to drop it and
    keep the path relative to it); longer folders are replaced first, so a model folder inside a
    repository root keeps its own name.
    """
    for folder in sorted(prefixes, key=len, reverse=True):
        if not folder:
            continue
        replacement = prefixes[folder]
        message = message.replace(folder + "/", replacement + "/" if replacement else "")
        message = message.replace(folder, replacement or "<repository>")
    return message
