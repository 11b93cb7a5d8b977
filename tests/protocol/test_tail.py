"""rawp tail's printer: streamed text on one line, tool results under their tool's name."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import msgspec

from protocol import frames as F
from protocol.reconnect import ConnectionStatus
from protocol.tail import TailPrinter
from protocol.view import SessionView

from . import strategies as S

CLIENT = F.Sender(role="client", participant_id="p-client")


def printed(frames: list[F.Frame]) -> str:
    """What the printer writes for ``frames`` (each stamped as the client's, with a seq)."""
    out: list[str] = []
    view = SessionView(S.SESSION_ID)
    printer = TailPrinter(out.append, view)
    for seq, frame in enumerate(frames, start=1):
        stamped = msgspec.structs.replace(frame, seq=seq, sender=CLIENT)
        view.receive(stamped)
        printer.frame(stamped)
    return "".join(out)


def test_a_turn_reads_like_a_transcript() -> None:
    """Deltas grow one line, results name their tool, usage shows the session's totals."""
    turn = S.uuid4(1)
    text = printed(
        [
            S.turn_start(turn, 0),
            S.thinking_delta("k1", "Let me "),
            S.thinking_delta("k1", "think."),
            S.thinking_done("k1"),
            S.tool_request("c1", "grep"),
            S.text_delta("t1", "Hel"),
            S.tool_result("c1", "ok", "3 matches"),
            S.text_delta("t1", "lo"),
            S.text_done("t1"),
            S.turn_end(turn),
            S.usage(100, 20),
        ]
    )
    assert text.splitlines() == [
        "── turn 1 ──",
        "  thinking: Let me think.",
        '  → grep {"cmd": "ls"}',
        "  assistant: Hel",
        "  ← grep ok: 3 matches",
        "  assistant: lo",
        "── turn 1 ended: end_turn ──",
        "  usage: 100 in / 20 out tokens · 0.2500 USD · session: 100 in / 20 out",
    ]


def test_histories_print_their_frames_and_say_what_was_lost() -> None:
    """A client's history and a truncated backlog are announced, then shown frame by frame."""
    out: list[str] = []
    printer = TailPrinter(out.append)
    inner = [S.user_message("hello"), S.tool_request("c9", "read_file")]
    history = msgspec.structs.replace(S.history(inner, truncated=True), seq=5, sender=CLIENT)
    printer.frame(history)
    lines = "".join(out).splitlines()
    assert lines[0].startswith("· the agent reconnected with 2 buffered frame(s); 3 frame(s) LOST")
    assert lines[1:] == ["user: hello", '  → read_file {"cmd": "ls"}']
    assert printer.session_frames == 3


def test_a_withdrawn_question_is_shown_with_its_reason() -> None:
    """agent.interaction.cancel prints as a withdrawal (notes §16.4), turns count from 1."""
    turn = S.uuid4(2)
    text = printed(
        [
            S.turn_start(turn, 0),
            S.interaction_request("i1"),
            S.interaction_cancel("i1", "no answer within 30 s"),
        ]
    )
    assert text.splitlines() == [
        "── turn 1 ──",
        "  ? confirmation: ok?",
        "  ✗ question withdrawn: no answer within 30 s",
    ]


MASTER = F.Sender(role="master", participant_id="node-1")


def test_an_undone_finalization_is_said() -> None:
    """The agent's history after the master's synthetic turn end: tail says the end is undone
    before the turn goes on; a truncated one (the end stands) says nothing of the kind."""
    turn = S.uuid4(3)

    def run(truncated: bool) -> list[str]:
        out: list[str] = []
        printer = TailPrinter(out.append)
        start = S.turn_start(turn, 0)
        synthetic_end = S.turn_end(turn, "disconnected", synthetic=True)
        inner = [S.text_delta("t1", "still here"), S.text_done("t1"), S.turn_end(turn)]
        for seq, (frame, sender) in enumerate(
            [
                (start, CLIENT),
                (synthetic_end, MASTER),
                (S.history(inner, truncated=truncated), CLIENT),
            ],
            start=1,
        ):
            printer.frame(msgspec.structs.replace(frame, seq=seq, sender=sender))
        return "".join(out).splitlines()

    lines = run(truncated=False)
    assert lines == [
        "── turn 1 ──",
        "── turn 1 ended: disconnected [synthetic] ──",
        "· the agent reconnected with 3 buffered frame(s)",
        "↺ turn 1 was not over: its [synthetic] end is undone and it goes on",
        "  assistant: still here",
        "── turn 1 ended: end_turn ──",
    ]
    assert not any(line.startswith("↺") for line in run(truncated=True))


def test_reconnect_status_is_one_line_per_series() -> None:
    """A lost connection, then the first failed attempt with its reason; later attempts of
    the same series print nothing; a welcome starts a new series."""
    out: list[str] = []
    printer = TailPrinter(out.append)
    refused = ConnectionRefusedError(111, "Connect call failed")
    printer.connection(ConnectionStatus.RECONNECTING, refused)
    printer.connection(ConnectionStatus.RECONNECTING, refused)
    printer.frame(S.welcome())
    printer.connection(ConnectionStatus.RECONNECTING, None)
    printer.connection(ConnectionStatus.CONNECTING, None)
    printer.connection(ConnectionStatus.RECONNECTING, refused)
    printer.connection(ConnectionStatus.RECONNECTING, refused)
    lines = "".join(out).splitlines()
    assert lines[0] == (
        "… the master is not reachable yet ([Errno 111] Connect call failed); retrying"
    )
    assert lines[1].startswith("following session ")
    assert lines[2:] == [
        "… connection lost; reconnecting",
        "… cannot reconnect yet ([Errno 111] Connect call failed); retrying",
    ]


def test_an_unreachable_master_is_tails_own_status_not_a_log_line() -> None:
    """``rawp tail`` against a closed port: its own status line on stdout, no library log on
    stderr, and --timeout bounds the wait for the first connection (exit 1, one line)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # released: nothing listens there
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAWP_")}
    done = subprocess.run(
        [sys.executable, "-m", "rawp.cli", "tail", "s1", "--token", "K", "--timeout", "1",
         "--ws-url", f"ws://127.0.0.1:{port}/v1/ws"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stdout.startswith("… the master is not reachable yet (")
    assert done.stdout.count("\n") == 1
    assert done.stderr == f"rawp tail: ws://127.0.0.1:{port}/v1/ws not reached within 1 s\n"


def test_an_expiry_reads_ended_with_its_window_never_deleted() -> None:
    """A session ended by its reattach window prints "ended: the agent did not come back
    within 7 days"; the word deleted does not appear."""
    expiry = F.Deleted(
        payload=F.DeletedPayload(
            session_id=S.SESSION_ID,
            reason="timeout",
            deleted_by="system",
            reattach_window_ms=7 * 86_400_000,
        ),
        message_id="m-end",
        session_id=S.SESSION_ID,
        timestamp=S.deleted().timestamp,
    )
    text = printed([expiry])
    assert "ended: the agent did not come back within 7 days" in text
    assert "deleted" not in text


def test_a_failed_run_says_why_on_one_escaped_line() -> None:
    """A turn that ended in error prints its code and message on the turn's end line, with
    the message's newlines and escapes written out (the agent wrote them)."""
    turn = S.uuid4(1)
    end = S.turn_end(turn, "error")
    failure = F.TurnError(code="model_overloaded", message="over\x1b[2Jloaded\r\nFAKE")
    end = msgspec.structs.replace(end, payload=msgspec.structs.replace(end.payload, error=failure))
    text = printed([S.turn_start(turn, 0), end])
    assert text.splitlines() == [
        "── turn 1 ──",
        "── turn 1 ended: error (model_overloaded: over\\x1b[2Jloaded\\x0d\\x0aFAKE) ──",
    ]
