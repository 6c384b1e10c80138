"""Settings, validated once at start-up and passed down (no module reads the environment itself)."""

from servelab.config.settings import ControlMode, LimitSettings, ServerSettings

__all__ = ["ControlMode", "LimitSettings", "ServerSettings"]
