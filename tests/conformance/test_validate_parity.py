"""``rawp validate`` = the master: every vector gets the same verdict and error code from both.

Each vector under tests/vectors/ is, on its own, fed to ``rawp validate --sequence --json``
(a fresh session state) and sent to a live master in a fresh session (client and edge
attached, the frame sent by the role ``rawp validate`` infers for it). The master's verdict is
the first ``session.error`` its sender gets before the answer to a barrier frame (a frame its
role may not send, refused with ``direction`` by the session's state machine, which judges one
sender's frames in order), or "valid" when none comes (or the frame ended the session). A
``connection.hello`` vector is sent as a connection's first frame instead: close 4400 is the
master's "invalid_frame"; a welcome or any other refusal (credential, session) means the frame
itself was valid. Both sides get the same
bytes: the vector's session id is replaced by the fresh session's, and a ``sender`` naming the
master is dropped (a participant cannot send as the master; the master ignores the field). A
revisit's ``at`` is moved to an hour from now: its window (60 s past to 366 days ahead) is judged
against the master's clock, which a log validator cannot know.
"""

from __future__ import annotations

import io
import json
import uuid
from contextlib import redirect_stdout
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conformance.runner import Context
from rawp.cli import main
from relay.server import Master
from tests.conformance.conftest import conformance_settings, target_of
from tests.protocol.vectors import Vector, load_vectors

# A frame each role may not send: refused with ``direction`` by the session, after the vector.
BARRIERS = {"client": ("control.cancel", {}), "edge": ("agent.state", {"state": "idle"})}
TIMEOUT_S = 5.0


def _wire_text(vector: Vector, session_id: str) -> tuple[str, str]:
    """The vector as sent to both sides, and the role that sends it to the master."""
    frame = vector.frame
    if isinstance(frame, dict):
        frame = dict(frame)
        sender = frame.get("sender")
        if isinstance(sender, dict) and sender.get("role") == "master":
            del frame["sender"]
        payload = frame.get("payload")
        revisit = frame.get("type") == "session.revisit.request"
        if revisit and isinstance(payload, dict) and isinstance(payload.get("at"), str):
            soon = datetime.now(UTC) + timedelta(hours=1)
            frame["payload"] = {**payload, "at": soon.isoformat(timespec="milliseconds")}
    text = json.dumps(frame, separators=(",", ":"), ensure_ascii=False)
    old = frame.get("session_id") if isinstance(frame, dict) else None
    if isinstance(old, str) and old:
        text = text.replace(json.dumps(old, ensure_ascii=False), json.dumps(session_id))
    role = "client"
    sender = frame.get("sender") if isinstance(frame, dict) else None
    if isinstance(sender, dict) and sender.get("role") in ("client", "edge"):
        role = str(sender["role"])
    else:
        from protocol import codec
        from protocol.cli import infer_role
        from protocol.errors import ProtocolError

        try:
            inferred = infer_role(codec.decode(text))
        except ProtocolError:
            inferred = "client"
        role = inferred if inferred in ("client", "edge") else "client"
    return text, role


def _validate_verdict(text: str, tmp: Path) -> str:
    """``rawp validate --sequence --json`` on the one line: ``valid`` or the error code."""
    path = tmp / f"{uuid.uuid4().hex}.jsonl"
    path.write_text(text + "\n", encoding="utf-8")
    out = io.StringIO()
    with redirect_stdout(out):
        main(["validate", "--sequence", "--json", str(path)])
    (line,) = [json.loads(x) for x in out.getvalue().splitlines() if x.strip()]
    return "valid" if line["valid"] else str(line["error_code"])


async def _master_verdict(ctx: Context, text: str, role: str, frame_type: str) -> str:
    """What the master makes of ``text`` sent by ``role`` in the case's fresh session."""
    if frame_type == "connection.hello":
        peer = await ctx.connect(label="hello")
        await peer.send_raw(text)
        try:
            first = await peer.recv(what="welcome or close")
        except Exception:
            return "invalid_frame" if peer.close_code == 4400 else "valid"
        return "valid" if first.get("type") == "connection.welcome" else f"sent {first}"
    client = await ctx.client()
    sender = client if role == "client" else await ctx.edge()
    await sender.send_raw(text)
    barrier_type, barrier_payload = BARRIERS[role]
    await sender.send(barrier_type, barrier_payload)
    errors: list[dict[str, Any]] = []
    while True:
        try:
            frame = await sender.recv(what="the barrier's direction error")
        except Exception:
            if sender.close_code is not None:
                break  # the frame ended the session (a fatal error, a delete request)
            raise
        if frame.get("type") != "session.error":
            continue
        errors.append(frame)
        message = str(frame.get("payload", {}).get("message", ""))
        if barrier_type in message and frame["payload"].get("error_code") == "direction":
            errors.pop()
            break
    return str(errors[0]["payload"]["error_code"]) if errors else "valid"


VECTORS = load_vectors()


async def test_every_vector_gets_the_same_verdict_from_validate_and_the_master(
    tmp_path: Path,
) -> None:
    """Same verdict and error code for every vector, from ``rawp validate`` and a live master."""
    import aiohttp

    master = Master(conformance_settings())
    await master.start()
    target = target_of(master)
    differences: list[str] = []
    try:
        async with aiohttp.ClientSession(trust_env=False) as http:
            for vector in VECTORS:
                ctx = Context(
                    target=target,
                    http_session=http,
                    session_id=f"parity-{uuid.uuid4().hex[:12]}",
                    timeout=TIMEOUT_S,
                )
                try:
                    text, role = _wire_text(vector, ctx.session_id)
                    by_validate = _validate_verdict(text, tmp_path)
                    by_master = await _master_verdict(ctx, text, role, vector.frame_type)
                finally:
                    await ctx.cleanup()
                if by_validate != by_master:
                    differences.append(
                        f"{vector.id} (sent by {role}): validate {by_validate}, master {by_master}"
                    )
    finally:
        await master.stop()
    assert not differences, "\n".join(differences)


@pytest.mark.parametrize("vector", [v for v in VECTORS if not v.valid], ids=lambda v: v.id)
def test_invalid_vectors_are_invalid_without_sequence_too(vector: Vector, tmp_path: Path) -> None:
    """Frame-level rules need no session: ``rawp validate`` without --sequence refuses too."""
    path = tmp_path / "one.jsonl"
    path.write_bytes(vector.frame_bytes() + b"\n")
    out = io.StringIO()
    with redirect_stdout(out):
        status = main(["validate", "--json", str(path)])
    (line,) = [json.loads(x) for x in out.getvalue().splitlines()]
    assert status == 1
    assert line["error_code"] == vector.error_code


def _stream(session_id: str) -> list[dict[str, Any]]:
    """A session's frames, in order, breaking and keeping rules of the state machine."""
    from conformance.wire import envelope, new_id, usage_payload

    def f(type_: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return envelope(session_id, type_, payload, **extra)

    turn, call, other = new_id(), new_id(), new_id()
    delta = f("agent.text.delta", {"block_id": "b1", "delta": "Hi"})
    good_inner = f("agent.state", {"state": "thinking"})
    not_an_envelope = {"type": "agent.state", "payload": {"state": "idle"}}
    other_session = envelope(f"{session_id}-other", "agent.state", {"state": "idle"})
    start = f("session.turn.start", {"turn_id": turn, "turn_index": 0})
    return [
        start,
        start,  # a repeated message_id is ignored by the master, not a second turn start
        delta,
        delta,  # the same message_id again: logged once, no error
        f("agent.text.done", {"block_id": "b1", "text": "Hi"}),
        f("agent.text.delta", {"block_id": "b1", "delta": "late"}),  # block_state
        f("tool.invoke.request", {"call_id": call, "tool_name": "probe", "input": {}}),
        f("tool.invoke.result", {"call_id": other, "status": "ok", "output": "?"}),  # pairing
        f("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"}),  # open call
        f("tool.invoke.result", {"call_id": call, "status": "ok", "output": "1"}),
        f("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"}),
        f("agent.state", {"state": "idle"}),  # usage_missing (folded anyway)
        f("session.usage", usage_payload(turn)),
        f(
            "session.compacted",
            {
                "summary": "grew",
                "previous_token_count": 1,
                "current_token_count": 9,
                "trigger": "auto",
            },
        ),
        f("session.renamed", {"session_id": session_id, "name": "x", "renamed_by": "edge"}),
        f("control.interaction.response", {"interaction_id": new_id(), "response": "yes"}),
        f("user.message", {"text": "from the edge"}),
        f(
            "session.history",
            {
                "frames": [good_inner, not_an_envelope, other_session],
                "buffer_status": {"policy_applied": "RING", "truncated": False},
                "last_sync_timestamp": good_inner["timestamp"],
                "last_message_id": "",
            },
        ),
        f("session.turn.start", {"turn_id": new_id(), "turn_index": 1}),
        f("session.turn.start", {"turn_id": new_id(), "turn_index": 2}),  # turn_state
    ]


async def test_a_stream_gets_the_same_verdicts_line_by_line(tmp_path: Path) -> None:
    """``rawp validate --sequence`` on a session's stream = the master, frame after frame."""
    import aiohttp

    from protocol import codec
    from protocol.cli import infer_role

    master = Master(conformance_settings())
    await master.start()
    try:
        async with aiohttp.ClientSession(trust_env=False) as http:
            ctx = Context(
                target=target_of(master),
                http_session=http,
                session_id=f"parity-stream-{uuid.uuid4().hex[:8]}",
                timeout=TIMEOUT_S,
            )
            try:
                frames = _stream(ctx.session_id)
                client = await ctx.client()
                edge = await ctx.edge()
                by_master: list[str] = []
                for frame in frames:
                    text = json.dumps(frame, separators=(",", ":"))
                    role = infer_role(codec.decode(text))
                    by_master.append(
                        await _judged_by_master(client if role == "client" else edge, text)
                    )
            finally:
                await ctx.cleanup()
    finally:
        await master.stop()
    path = tmp_path / "stream.jsonl"
    path.write_text("\n".join(json.dumps(f) for f in frames) + "\n", encoding="utf-8")
    out = io.StringIO()
    with redirect_stdout(out):
        main(["validate", "--sequence", "--json", str(path)])
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    by_validate = ["valid" if x["valid"] else str(x["error_code"]) for x in lines]
    assert by_validate == by_master
    assert {"block_state", "tool_pairing", "usage_missing", "invalid_frame", "turn_state"} <= set(
        by_master
    )


async def _judged_by_master(sender: Any, text: str) -> str:
    """Send ``text`` from ``sender`` (an attached peer); its verdict, as in _master_verdict."""
    role = sender.role
    await sender.send_raw(text)
    barrier_type, barrier_payload = BARRIERS[role]
    await sender.send(barrier_type, barrier_payload)
    errors: list[str] = []
    while True:
        frame = await sender.recv(what="the barrier's direction error")
        if frame.get("type") != "session.error":
            continue
        payload = frame.get("payload", {})
        if barrier_type in str(payload.get("message", "")) and payload.get("error_code") == (
            "direction"
        ):
            return errors[0] if errors else "valid"
        errors.append(str(payload.get("error_code")))
