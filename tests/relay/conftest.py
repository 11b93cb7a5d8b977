"""Fixtures for the relay tests: a master per test (the end-to-end suite's)."""

from __future__ import annotations

from tests.e2e.conftest import make_master, master

__all__ = ["make_master", "master"]
