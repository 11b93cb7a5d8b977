"""The master's HTTP side: REST, health, metrics (aiohttp)."""

from .app import create_app

__all__ = ["create_app"]
