"""structlog set-up: JSON lines in production, colourless console lines in development.

Per-connection context (connection id, session, role, participant) is bound with
``structlog.contextvars`` by the WebSocket endpoint. Secrets are never passed to a logger.
"""

from __future__ import annotations

import logging
import sys

import structlog

__all__ = ["configure_logging"]


def configure_logging(fmt: str = "console", level: str = "info") -> None:
    """Configure structlog (and the stdlib loggers it routes) once per process."""
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(numeric, logging.WARNING), stream=sys.stderr)
