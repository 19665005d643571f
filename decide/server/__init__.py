"""HTTP server: `create_app(config, decider)` serves both wire protocols (only this package knows Flask)."""

from .app import create_app
from .config import ServerConfig

__all__ = ["create_app", "ServerConfig"]
