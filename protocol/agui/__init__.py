"""AG-UI ⇄ RAWP, sans I/O: a session's log as AG-UI events, and AG-UI events as RAWP frames.

The decisions are notes §16.5 (a turn is a run, ``threadId`` = session id, ``runId`` = turn id,
a text block is a text message, thinking is reasoning, a tool call is ``TOOL_CALL_*`` +
``TOOL_CALL_RESULT``, a pending interaction is an interrupt, user messages are the run input's
messages, RAWP-only frames are ``CUSTOM`` events named after their RAWP type, a late joiner
gets a ``MESSAGES_SNAPSHOT``). docs/ag-ui.md has the table both ways. AG-UI's event models and
its rules come from the official ``ag-ui-protocol`` package (``ag_ui.core``) and the checks
``@ag-ui/client`` 1.0 runs on every stream (its ``verifyEvents``); nothing of AG-UI is copied
by hand here.

Two pure state machines:

* :class:`AguiEgress` folds stamped log entries (RAWP frames with their seq) into AG-UI
  events, each with its SSE id. It is a function of the log alone, so a stream resumed from
  ``Last-Event-ID`` (:func:`parse_event_id`) re-folds the log silently up to the cursor and
  continues with exactly the events that followed. Rules of the AG-UI client it keeps:
  ``RUN_STARTED`` first; every message, reasoning block and tool call closed before the run's
  end; nothing between runs (RAWP-only frames outside a turn are not sent — they stay in the
  RAWP log); a turn's ``session.usage`` (which RAWP sends after ``session.turn.end``, §7.5.2)
  is placed before the run's end, as a ``CUSTOM`` event and in ``RUN_FINISHED.usage``.
  §7.8: the master's synthetic finalization frames are held back (the AG-UI run stays open
  while the agent is away); a client history that unfinalizes (§7.8.3) drops them, anything
  else makes them final.
* :class:`AguiIngest` folds the events of one AG-UI agent run into :class:`RawpOp` s, the
  frames a RAWP client sends (turn start/end, blocks, tool calls, interactions, usage). A
  stream that breaks AG-UI's rules ends the turn: every open block is closed, every open tool
  call gets an ``error`` result, the turn ends ``error`` with usage and a ``session.error``
  says why — never a half-open turn.
"""

from __future__ import annotations

from .egress import AguiEgress, EmittedEvent
from .ingest import AguiIngest, RawpOp
from .messages import messages_from_view
from .wire import (
    decode_event,
    encode_sse,
    input_user_messages,
    message_text,
    parse_event_id,
    run_input,
)

__all__ = [
    "AguiEgress",
    "AguiIngest",
    "EmittedEvent",
    "RawpOp",
    "decode_event",
    "encode_sse",
    "input_user_messages",
    "message_text",
    "messages_from_view",
    "parse_event_id",
    "run_input",
]
