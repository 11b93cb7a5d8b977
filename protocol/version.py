"""This build's version: ``rawp --version``, the ``/healthz`` body, the build-info metric."""

from __future__ import annotations

from importlib import metadata
from typing import Final

from .frames import PROTOCOL_VERSION

__all__ = ["PROTOCOL_VERSION", "VERSION", "version_line"]


def _installed() -> str:
    try:
        return metadata.version("rawp")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"


VERSION: Final = _installed()
"""The ``rawp`` package's version (pyproject.toml)."""


def version_line() -> str:
    """What ``rawp --version`` prints."""
    return f"rawp {VERSION} (RAWP protocol {PROTOCOL_VERSION})"
