"""Log lines never carry a received control character (notes §16.7, relay/logs.py)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from relay.logs import configure_logging, escape_controls
from tests.protocol.test_names import CONTROLS

EVIL = "x" + "".join(CONTROLS) + "\n2026-01-01 [error] forged line"


@pytest.fixture(autouse=True)
def _keep_logging_config() -> Iterator[None]:
    """These tests configure structlog; every other test keeps the configuration it had."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


def _render(fmt: str, **fields: object) -> str:
    """One event through the configured processor chain, rendered as ``fmt`` would."""
    configure_logging(fmt)
    processors = structlog.get_config()["processors"]
    event: object = {"event": "frame_refused", **fields}
    for processor in processors:
        event = processor(None, "info", event)  # type: ignore[arg-type]
    assert isinstance(event, str)
    return event


def test_every_control_character_is_escaped_in_console_lines() -> None:
    """A console log line holds no control character, whatever a field carried."""
    line = _render("console", type=EVIL, reason=[EVIL], nested={"k": EVIL})
    assert not [c for c in CONTROLS if c in line]
    assert "\\x0a2026-01-01 [error] forged line" in line


def test_json_lines_stay_one_line_and_say_the_same() -> None:
    """A JSON log line is one line and its field shows the escaped text."""
    line = _render("json", type=EVIL)
    assert "\n" not in line
    assert json.loads(line)["type"].startswith("x\\x00\\x01")


def test_the_traceback_keeps_its_own_lines() -> None:
    """The master's own traceback stays readable; the received fields beside it do not."""
    out = escape_controls(None, "error", {"exception": "Traceback\n  line", "type": "a\nb"})
    assert out == {"exception": "Traceback\n  line", "type": "a\\x0ab"}


def test_configure_logging_installs_the_escaping_before_the_renderer() -> None:
    """escape_controls runs after every processor that adds text, right before rendering."""
    configure_logging("console")
    processors = structlog.get_config()["processors"]
    assert processors[-2] is escape_controls


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_a_library_logger_line_carries_no_control_character(fmt: str) -> None:
    """What a library logs through the stdlib (the WebSocket layer, aiohttp, redis) is escaped
    too: a peer's text quoted in its message forges no line."""
    configure_logging(fmt)
    root = logging.getLogger()
    (handler,) = root.handlers
    record = logging.LogRecord(
        "rawp.ws.wire", logging.WARNING, __file__, 1, "bad: %s", (EVIL,), None
    )
    line = handler.format(record)
    assert "\n" not in line
    assert not [c for c in CONTROLS if c in line]
    assert "\\x0a2026-01-01 [error] forged line" in line
