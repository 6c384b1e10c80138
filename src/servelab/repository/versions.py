"""Version folders and Triton's version policies (latest N, all, specific)."""

from __future__ import annotations

from pathlib import Path

from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc
from servelab.trust import resolve_inside

__all__ = ["available_versions", "select_versions"]


def available_versions(model_dir: Path) -> dict[int, Path]:
    """Numeric sub-folders; as in Triton, a name starting with '0' (e.g. '0', '007') is ignored.

    A version folder that is a symlink leading out of the model's folder is refused.
    """
    found: dict[int, Path] = {}
    for child in model_dir.iterdir():
        if child.is_dir() and child.name.isascii() and child.name.isdigit() and not child.name.startswith("0"):
            resolve_inside(model_dir, child.name, f"version folder {child.name}")
            found[int(child.name)] = child
    return dict(sorted(found.items()))


def select_versions(config: mc.ModelConfig, available: list[int]) -> list[int]:
    """The versions the policy serves, ascending. Default policy: latest 1."""
    policy = config.version_policy
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return sorted(available)
    if which == "specific":
        wanted = sorted(set(policy.specific.versions))
        missing = [v for v in wanted if v not in available]
        if missing:
            raise InvalidArgument(
                f"model '{config.name}': version_policy specific lists {missing}, which have no folder "
                f"(available: {sorted(available)})"
            )
        return wanted
    count = policy.latest.num_versions if which == "latest" else 1
    if count < 1:
        raise InvalidArgument(f"model '{config.name}': version_policy latest num_versions must be >= 1")
    return sorted(available)[-count:]
