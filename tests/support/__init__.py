"""Helpers shared by the test suites (servers the tests start for themselves)."""

__all__: list[str] = []
