"""The store contract suite: every backend passes the same tests (notes §12, seed 004)."""

__all__: list[str] = []
