"""structlog set-up: JSON lines in production, colourless console lines in development.

Every logged string has its control characters escaped (:func:`escape_controls`), so no
received CR/LF forges a log line. Per-connection context (connection id, session, role,
participant) is bound with ``structlog.contextvars`` by the WebSocket endpoint. Secrets are
never passed to a logger.
"""

from __future__ import annotations

import logging
import sys

import structlog

from protocol import names

__all__ = ["configure_logging", "escape_controls"]

# The traceback is the master's own text, laid out on lines on purpose.
_MULTILINE_KEYS = frozenset({"exception"})


def escape_controls(
    logger: object, method_name: str, event_dict: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    """Write every control character of a logged string as an escape (notes §16.7).

    Values can be received text (a frame type, a reason, a participant id): a CR/LF or an
    ESC in them must not start a forged log line or drive the operator's terminal.
    """
    for key, value in event_dict.items():
        if key not in _MULTILINE_KEYS:
            event_dict[key] = _escaped(value)
    return event_dict


def _escaped(value: object) -> object:
    if isinstance(value, str):
        return names.one_line(value)
    if isinstance(value, list | tuple):
        return [_escaped(v) for v in value]
    if isinstance(value, dict):
        return {k: _escaped(v) for k, v in value.items()}
    return value


class _StderrLogger(structlog.PrintLogger):
    """A print logger that writes to whatever ``sys.stderr`` is when a line is logged, not
    what it was when logging was configured: a command run in-process (tests, embedding)
    may have replaced it and closed the old one since."""

    def __init__(self, *_args: object) -> None:
        super().__init__(sys.stderr)

    def msg(self, message: str) -> None:
        with self._lock:
            print(message, file=sys.stderr, flush=True)

    log = debug = info = warn = warning = err = error = critical = fatal = exception = msg


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The stdlib side of :class:`_StderrLogger`: the stream is looked up for each record."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure_logging(fmt: str = "console", level: str = "info") -> None:
    """Configure structlog, and route the stdlib loggers (the WebSocket layer, aiohttp, redis, the
    client library) through the same renderer: in JSON mode every line on stderr is one JSON
    object (issue 15), whoever logged it."""
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            timestamper,
            structlog.processors.format_exc_info,
            escape_controls,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=_StderrLogger,
        cache_logger_on_first_use=True,
    )
    handler = _StderrHandler()
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                structlog.processors.add_log_level,
                timestamper,
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                escape_controls,  # a library's message may quote what a peer sent
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    # Libraries' chatter below WARNING stays out unless asked for with --log-level debug.
    root.setLevel(numeric if numeric <= logging.DEBUG else max(numeric, logging.WARNING))
