"""AG-UI ingest: an AG-UI agent behind a RAWP session (``rawp bridge ag-ui``; notes §16.5)."""

from .bridge import AguiBridge

__all__ = ["AguiBridge"]
