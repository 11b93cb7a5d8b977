"""``rawp tail``: follow one session in the terminal (notes §5 resume; RAWP §7, §7.1.1, §7.8).

An edge built on :class:`protocol.client.RawpClient`: it attaches (``--from-start`` asks for
the whole log as the backlog), prints every frame readably — turns, streamed text and
thinking as they arrive, tool calls paired with their results, interactions, usage with the
session's totals, compactions, presence, errors — and resumes by itself after a drop (the
client's reconnect; the backlog is printed like live frames, so nothing is missed or shown
twice). It exits 0 on ``session.deleted``, after ``--max-frames`` session frames or after
``--timeout`` seconds; 1 when the master refuses it or cannot be reached.

:class:`TailPrinter` is the renderer, usable on its own (it only needs a ``write``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from . import codec, names
from .cli_flags import LOCAL_WS_URL, add_connection_flags, connection
from .endings import ending_notice
from .errors import HandshakeError, RawpError
from .finalize import unfinalizes
from .frames import (
    AgentState,
    Compacted,
    Deleted,
    Frame,
    GenericFrame,
    History,
    InteractionCancel,
    InteractionRequest,
    InteractionResponse,
    Presence,
    Renamed,
    RevisitCancel,
    RevisitRequest,
    SessionError,
    TextDelta,
    TextDone,
    ThinkingDelta,
    ThinkingDone,
    ToolRequest,
    ToolResult,
    TurnEnd,
    TurnStart,
    Usage,
    UserMessage,
    Wake,
    Welcome,
)
from .render import revisit_text, wake_text
from .view import SessionView

if TYPE_CHECKING:
    from .client import ConnectionStatus

__all__ = ["TailPrinter", "add_tail_parser", "follow"]

_OUTPUT_CHARS: Final = 160


def _quoted(text: str) -> str:
    """A name in double quotes, control characters escaped (JSON's quoting, not repr)."""
    return json.dumps(text, ensure_ascii=False)


def _short(value: Any, limit: int = _OUTPUT_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class TailPrinter:
    """Turns frames into terminal lines; streamed deltas stay on one growing line."""

    def __init__(self, write: Callable[[str], None], view: SessionView | None = None) -> None:
        self._write = write
        self._view = view
        self._streaming: str | None = None  # block id whose line is still open
        self._tools: dict[str, str] = {}  # call_id -> tool name
        self._turns: dict[str, int] = {}  # turn_id -> turn index
        self._texts_seen: set[str] = set()
        self.session_frames = 0  # frames of the session printed (histories' frames included)
        self._connected_once = False
        self._retry_reported = False  # the current series of failed attempts was shown
        self._finalized_turn: int | str | None = None  # the turn a synthetic end closed

    # --- output helpers ------------------------------------------------------------------

    def _line(self, text: str) -> None:
        if self._streaming is not None:
            self._write("\n")
            self._streaming = None
        # Received text never drives the terminal (ESC) or forges a line (notes §16.7).
        self._write(names.one_line(text) + "\n")

    def _stream(self, block_id: str, prefix: str, delta: str) -> None:
        if self._streaming != block_id:
            if self._streaming is not None:
                self._write("\n")
            self._write(prefix)
            self._streaming = block_id
        self._write(names.text_body(delta))

    def _end_stream(self, block_id: str) -> None:
        if self._streaming == block_id:
            self._write("\n")
            self._streaming = None

    # --- events --------------------------------------------------------------------------

    def connection(self, status: ConnectionStatus, error: BaseException | None = None) -> None:
        """A connection status change (reconnecting, closed, …); ``error``: why the last
        attempt to connect failed, if it did. One line when the connection is lost and one
        for the first failed attempt of a series — a long outage does not fill the screen."""
        if status.value != "reconnecting":
            return
        if error is None:
            if self._connected_once:
                self._line("… connection lost; reconnecting")
            return
        if self._retry_reported:
            return
        self._retry_reported = True
        reason = _short(str(error) or type(error).__name__)
        if self._connected_once:
            self._line(f"… cannot reconnect yet ({reason}); retrying")
        else:
            self._line(f"… the master is not reachable yet ({reason}); retrying")

    def frame(self, frame: Frame | GenericFrame) -> None:
        """Print one frame the master delivered (a backlog's frames one by one)."""
        if isinstance(frame, Welcome):
            self._welcome(frame)
            return
        if isinstance(frame, History):
            self._history(frame)
            return
        self.session_frames += 1
        synthetic = " [synthetic]" if frame.synthetic else ""
        if isinstance(frame, GenericFrame):
            self._line(f"· {frame.type} (unknown type, relayed untouched)")
        elif isinstance(frame, TurnStart):
            p = frame.payload
            # Turns are numbered from 1, as on the dashboard and in exports (turn_index + 1).
            self._turns[p.turn_id] = p.turn_index + 1
            self._finalized_turn = None
            mode = f" · {p.mode}" if p.mode else ""
            self._line(f"── turn {p.turn_index + 1}{mode} ──")
        elif isinstance(frame, TurnEnd):
            p_end = frame.payload
            index = self._turns.get(p_end.turn_id, "?")
            calls = p_end.tool_invocation_count
            tools = f", {calls} tool call(s)" if calls is not None else ""
            self._finalized_turn = index if frame.synthetic else None
            self._line(f"── turn {index} ended: {p_end.stop_reason}{tools}{synthetic} ──")
        elif isinstance(frame, ThinkingDelta):
            self._stream(frame.payload.block_id, "  thinking: ", frame.payload.delta)
        elif isinstance(frame, ThinkingDone):
            self._end_stream(frame.payload.block_id)
        elif isinstance(frame, TextDelta):
            self._texts_seen.add(frame.payload.block_id)
            self._stream(frame.payload.block_id, "  assistant: ", frame.payload.delta)
        elif isinstance(frame, TextDone):
            block = frame.payload.block_id
            if block not in self._texts_seen and frame.payload.text:
                self._line(f"  assistant: {frame.payload.text}")
            self._end_stream(block)
        elif isinstance(frame, ToolRequest):
            p_req = frame.payload
            self._tools[p_req.call_id] = p_req.tool_name
            self._line(f"  → {p_req.tool_name} {_short(p_req.input)}")
        elif isinstance(frame, ToolResult):
            p_res = frame.payload
            name = self._tools.get(p_res.call_id, p_res.call_id)
            output = f": {_short(p_res.output)}" if p_res.output is not None else ""
            self._line(f"  ← {name} {p_res.status}{output}{synthetic}")
        elif isinstance(frame, InteractionRequest):
            p_ask = frame.payload
            options = f" {_short(p_ask.options)}" if p_ask.options else ""
            self._line(f"  ? {p_ask.kind}: {p_ask.prompt}{options}")
        elif isinstance(frame, InteractionResponse):
            self._line(f"  ✓ answered: {_short(frame.payload.response)}")
        elif isinstance(frame, InteractionCancel):
            reason = f": {_short(frame.payload.reason)}" if frame.payload.reason else ""
            self._line(f"  ✗ question withdrawn{reason}")
        elif isinstance(frame, UserMessage):
            self._line(f"user: {frame.payload.text}")
        elif isinstance(frame, Usage):
            self._usage(frame)
        elif isinstance(frame, Compacted):
            p_c = frame.payload
            self._line(
                f"  ⟲ context compacted ({p_c.trigger}): {p_c.previous_token_count} → "
                f"{p_c.current_token_count} tokens · {_short(p_c.summary)}"
            )
        elif isinstance(frame, AgentState):
            if frame.synthetic:
                self._line(f"  (agent idle{synthetic})")
        elif isinstance(frame, Presence):
            for p_p in frame.payload.all_changes():
                self._line(f"· {p_p.role} {p_p.participant_id[:12]} {p_p.state}")
        elif isinstance(frame, Renamed):
            p_r = frame.payload
            self._line(f"· renamed to {_quoted(p_r.name)} by {p_r.renamed_by}")
        elif isinstance(frame, Deleted):
            p_d = frame.payload
            kind, text = ending_notice(p_d.reason, p_d.deleted_by, p_d.reattach_window_ms)
            self._line(f"× {kind}: {text}" if kind == "ended" else f"× {text}")
        elif isinstance(frame, SessionError):
            p_e = frame.payload
            fatal = " (fatal)" if p_e.fatal else ""
            # A participant's session.error is its report, not the session's notice (§16.8).
            role = frame.sender.role if frame.sender is not None else "master"
            who = "" if role == "master" else f" (reported by the {role})"
            self._line(f"! {p_e.error_code}{fatal}{who}: {p_e.message}")
        elif isinstance(frame, RevisitRequest):
            self._line(f"⏰ {revisit_text(frame.payload.at, frame.payload.reason)}")
        elif isinstance(frame, RevisitCancel):
            self._line(f"⏰ revisit withdrawn: {_quoted(frame.payload.revisit_id)}")
        elif isinstance(frame, Wake):
            self._line(f"⏰ {wake_text(frame.payload.at, frame.payload.reason)}")
        else:
            self._line(f"· {frame.type}")

    def _welcome(self, frame: Welcome) -> None:
        w = frame.payload
        s = w.session
        self._retry_reported = False
        if self._connected_once:
            self._line(f"… reconnected (resumed: {str(w.resumed).lower()})")
            return
        self._connected_once = True
        name = f" {_quoted(s.name)}" if s.name else ""
        self._line(
            f"following session {s.session_id}{name} · {s.status} · {s.head_seq} frame(s) "
            f"in the log · as edge {w.participant_id[:12]}"
        )

    def _history(self, frame: History) -> None:
        p = frame.payload
        s = p.buffer_status
        backlog = frame.seq is None
        lost = ""
        if s.truncated:
            count = "some" if s.lost_frame_count is None else str(s.lost_frame_count)
            lost = f"; {count} frame(s) LOST ({s.policy_applied} buffer): data is incomplete"
        if backlog:
            if p.frames or lost:
                self._line(f"· backlog: {len(p.frames)} frame(s){lost}")
        else:
            self.session_frames += 1
            self._line(f"· the agent reconnected with {len(p.frames)} buffered frame(s){lost}")
        inner_frames: list[Frame | GenericFrame] = []
        for raw in p.frames:
            try:
                inner_frames.append(codec.decode(raw))
            except RawpError:
                self._line("· (a frame in the history could not be decoded)")
        turn = self._finalized_turn
        if not backlog and turn is not None and unfinalizes(s, inner_frames):
            # The agent's history takes back the master's synthetic ends (§7.8.3): say so,
            # or the turn printed as ended would seem to go on after its end.
            self._finalized_turn = None
            self._line(f"↺ turn {turn} was not over: its [synthetic] end is undone and it goes on")
        for inner in inner_frames:
            self.frame(inner)

    def _usage(self, frame: Usage) -> None:
        p = frame.payload
        tokens = p.token_usage
        cost = p.cost_usage
        limit = "" if cost.limit < 0 else f" of {cost.limit:g}"
        line = (
            f"  usage: {tokens.input_tokens} in / {tokens.output_tokens} out tokens · "
            f"{cost.used:.4f}{limit} {cost.unit}"
        )
        window = p.context_window
        if window is not None and window.utilization is not None:
            line += f" · context {window.utilization:.0%}"
        if self._view is not None:
            t = self._view.totals
            line += f" · session: {t.input_tokens} in / {t.output_tokens} out"
        self._line(line)


# --- the command ---------------------------------------------------------------------------


async def follow(
    session_id: str,
    *,
    ws_url: str,
    token: str,
    from_start: bool = False,
    max_frames: int | None = None,
    timeout: float | None = None,
    write: Callable[[str], None] | None = None,
    presence: bool = True,
) -> int:
    """Follow ``session_id`` until it is deleted, ``max_frames`` or ``timeout``; exit status.
    ``presence=False``: print no attaches and detaches (none are sent: docs/protocol.md §5)."""
    from .client import Backoff, RawpClient

    out = write or _stdout
    view = SessionView(session_id)
    printer = TailPrinter(out, view)
    client = RawpClient(
        ws_url,
        session_id,
        role="edge",
        token=token,
        from_start=from_start,
        view=view,
        backoff=Backoff(initial=0.25, maximum=5.0),
        on_status=lambda status: printer.connection(status, client.last_connect_error),
        presence=presence,
    )
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        try:
            async with asyncio.timeout(timeout):  # --timeout bounds the first connect too
                await client.connect()
        except TimeoutError:
            sys.stderr.write(f"rawp tail: {ws_url} not reached within {timeout:g} s\n")
            return 1
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                frame = await client.receive(timeout=remaining)
            except TimeoutError:
                out(f"(stopped after {timeout:g} s)\n")
                return 0
            if frame is None:
                return 0
            printer.frame(frame)
            if isinstance(frame, Deleted):
                return 0
            if max_frames is not None and printer.session_frames >= max_frames:
                return 0
    except HandshakeError as exc:
        sys.stderr.write(f"rawp tail: the master refused: {exc.message} ({exc.close_code})\n")
        return 1
    except RawpError as exc:
        sys.stderr.write(f"rawp tail: {exc.message}\n")
        return 1
    finally:
        await client.close()


def _stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def add_tail_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``tail`` to the ``rawp`` command."""
    tail = subparsers.add_parser(
        "tail",
        help="follow a session in the terminal",
        description="Attach to a session as an edge and print its frames readably: turns, "
        "streamed text, tool calls with their results, usage. Reconnects by itself after a "
        "drop and resumes where it was.",
    )
    tail.add_argument("session", metavar="SESSION", help="the session id (required)")
    add_connection_flags(
        tail,
        ws=LOCAL_WS_URL,
        token="an API key or a session token (edge grant) to attach with",
    )
    tail.add_argument(
        "--from-start",
        action="store_true",
        help="print the whole log first, then follow (default: only what comes next)",
    )
    tail.add_argument(
        "--max-frames",
        type=int,
        default=None,
        metavar="N",
        help="exit after N session frames (default: follow until the session ends)",
    )
    tail.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="exit after SECONDS (default: no limit)",
    )
    tail.add_argument(
        "--no-presence",
        dest="presence",
        action="store_false",
        help="ask the master for no presence (who attached, who left): a quieter tail "
        "(default: presence shown)",
    )
    tail.set_defaults(handler=_tail)


def _tail(args: argparse.Namespace) -> int:
    from .client import run

    where = connection(args)
    # The client library's "could not connect" notes are the printer's status lines here:
    # one voice on stdout, not a log line mixed into the transcript.
    library = logging.getLogger("rawp.client")
    library.propagate = False
    library.addHandler(logging.NullHandler())
    try:
        return run(
            follow(
                args.session,
                ws_url=where.ws_url,
                token=where.token,
                from_start=args.from_start,
                max_frames=args.max_frames,
                timeout=args.timeout,
                presence=args.presence,
            )
        )
    except KeyboardInterrupt:
        return 130
