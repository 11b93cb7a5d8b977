"""Tests of the code's shape: who may use whose names (issue 14)."""

__all__: list[str] = []
