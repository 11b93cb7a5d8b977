"""The client library end to end: restarts, buffer overflow, restore, random drops, demo + tail."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import codec
from protocol import frames as F
from protocol.buffers import Policy
from protocol.client import ConnectionStatus, RawpClient
from protocol.finalize import CONNECTION_LOST, snapshot
from protocol.view import InteractionBlock, SessionView, TextBlock, ToolCallBlock, TurnBlock
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.protocol import strategies as S
from tests.support.clients import (
    FAST,
    KeptStore,
    client_frame_ids,
    log_frames,
    replayed_view,
    start_master,
    wait_until,
)

SID = "s-client-e2e"
REPO = Path(__file__).resolve().parents[2]
OFFLINE = (ConnectionStatus.RECONNECTING, ConnectionStatus.CONNECTING)


async def logged(store: KeptStore, session_id: str, frames: list[F.Frame]) -> bool:
    """True once every one of ``frames`` is in the log (live or inside a history)."""
    have = set(client_frame_ids(await store.read(session_id)))
    return all(f.message_id in have for f in frames)


def assert_view_matches_log(view: SessionView, entries: Any) -> None:
    """The view shows exactly what a replay of the log from seq 1 shows."""
    replayed = replayed_view(view.session_id, entries)
    assert view.blocks == replayed.blocks
    assert snapshot(view.state) == snapshot(replayed.state)


async def caught_up(
    view: SessionView, store: KeptStore, participant_id: str | None, role: str = "edge"
) -> bool:
    """True when the view has the newest log entry meant for that participant."""
    entries = await store.read(view.session_id)
    meant = [e.seq for e in entries if e.delivered_to(participant_id or "", role)]
    return not meant or view.last_seq >= meant[-1]


# --- a master restart mid-turn ---------------------------------------------------------------


async def test_client_survives_a_master_restart_mid_turn() -> None:
    """Across a restart every agent frame is logged once, in order, and the edge view agrees."""
    store = KeptStore()
    first = await start_master(store)
    port = first.ws_port
    agent = RawpClient(first.ws_url, SID, role="client", token=API_KEY, create=True, backoff=FAST)
    edge = RawpClient(first.ws_url, SID, role="edge", token=API_KEY, backoff=FAST, from_start=True)
    second: Master | None = None
    try:
        await agent.connect()
        await edge.connect()
        turn = await agent.turn_start()
        sent: list[F.Frame] = [turn]
        sent.append(await agent.thinking_delta("k1", "Let me look"))
        sent.append(await agent.thinking_done("k1"))
        sent.append(await agent.text_delta("t1", "Hel"))
        sent.append(await agent.tool_request("c1", "grep", {"pattern": "TODO"}))
        await wait_until(lambda: logged(store, SID, sent), what="frames before the restart")
        await first.stop()
        await agent.wait_status(*OFFLINE, timeout=10)
        sent.append(await agent.tool_result("c1", "ok", "3 matches"))
        sent.append(await agent.text_delta("t1", "lo"))
        assert agent.buffered == 2
        second = await start_master(store, ws_port=port)
        await agent.wait_status(ConnectionStatus.CONNECTED, timeout=10)
        sent.append(await agent.text_done("t1"))
        sent.append(await agent.turn_end(turn.payload.turn_id, tool_invocation_count=1))
        sent.append(
            await agent.usage(input_tokens=10, output_tokens=5, turn_id=turn.payload.turn_id)
        )
        await wait_until(lambda: logged(store, SID, sent), what="frames after the restart")
        entries = await store.read(SID)
        assert client_frame_ids(entries) == [f.message_id for f in sent]
        await wait_until(lambda: caught_up(edge.view, store, edge.participant_id), what="edge")
        entries = await store.read(SID)
        assert_view_matches_log(edge.view, entries)
        text = next(b for b in edge.view.blocks if isinstance(b, TextBlock))
        assert text.text == "Hello"
        assert not text.synthetic
        assert edge.view.status == "idle"
        assert agent.view.skipped == 0
    finally:
        await agent.close()
        await edge.close()
        for master in (first, second):
            if master is not None:
                await master.stop()


# --- buffer overflow while disconnected --------------------------------------------------------


def reference_status(policy: Policy, sizes: list[int], capacity: int) -> tuple[list[int], int, int]:
    """(indexes kept, lost, high watermark) per notes §15.4, computed independently."""
    held: list[int] = []
    lost = 0
    peak = 0
    closed = False
    for index, size in enumerate(sizes):
        if policy == "NONE":
            lost += 1
            continue
        if policy == "DROP":
            if closed or sum(sizes[i] for i in held) + size > capacity:
                closed = True
                lost += 1
                continue
        else:
            while held and sum(sizes[i] for i in held) + size > capacity:
                held.pop(0)
                lost += 1
        held.append(index)
        peak = max(peak, sum(sizes[i] for i in held))
    return held, lost, peak


@pytest.mark.parametrize("policy", ["RING", "DROP", "NONE"])
async def test_buffer_overflow_sends_the_exact_buffer_status(policy: Policy) -> None:
    """Eight frames while the master is down, room for three: §7.1.1 status to the frame."""
    sample = codec.encode(
        F.TextDelta(
            payload=F.TextDeltaPayload(block_id="b1", delta="x" * 120),
            message_id=codec.new_message_id(),
            session_id=SID,
            timestamp=codec.now(),
        )
    )
    capacity = 3 * len(sample) + len(sample) // 2
    store = KeptStore()
    first = await start_master(store)
    port = first.ws_port
    agent = RawpClient(
        first.ws_url,
        SID,
        role="client",
        token=API_KEY,
        create=True,
        backoff=FAST,
        buffer=F.BufferRequest(policy=policy, capacity_bytes=capacity),
    )
    second: Master | None = None
    try:
        await agent.connect()
        turn = await agent.turn_start()
        await wait_until(lambda: logged(store, SID, [turn]), what="turn start logged")
        await first.stop()
        await agent.wait_status(*OFFLINE, timeout=10)
        offline = [await agent.text_delta("b1", "x" * 120) for _ in range(8)]
        sizes = [len(codec.encode(f)) for f in offline]
        kept, lost, peak = reference_status(policy, sizes, capacity)
        assert len(kept) == {"RING": 3, "DROP": 3, "NONE": 0}[policy]
        assert lost == 8 - len(kept)
        assert agent.buffer_status() == F.BufferStatus(
            policy_applied=policy, truncated=True, lost_frame_count=lost, buffer_high_watermark=peak
        )
        second = await start_master(store, ws_port=port)
        await agent.wait_status(ConnectionStatus.CONNECTED, timeout=10)

        async def history_logged() -> bool:
            return any(e.type == "session.history" for e in await store.read(SID))

        await wait_until(history_logged, what="the client's history")
        entries = await store.read(SID)
        (entry,) = [e for e in entries if e.type == "session.history"]
        history = codec.decode(entry.data)
        assert isinstance(history, F.History)
        assert entry.sender_role == "client"
        assert history.payload.buffer_status == F.BufferStatus(
            policy_applied=policy, truncated=True, lost_frame_count=lost, buffer_high_watermark=peak
        )
        inside = [codec.decode(raw).message_id for raw in history.payload.frames]
        assert inside == [offline[i].message_id for i in kept]
        assert history.payload.last_message_id == turn.message_id
        assert history.payload.last_sync_timestamp == turn.timestamp
        notices = [codec.decode(e.data) for e in entries if e.type == "session.error"]
        assert any(
            isinstance(n, F.SessionError)
            and n.payload.error_code == "history_truncated"
            and n.payload.lost_frame_count == lost
            for n in notices
        )
        assert agent.buffer_status().truncated is False  # a fresh buffer after the history
    finally:
        await agent.close()
        for master in (first, second):
            if master is not None:
                await master.stop()


async def test_a_delete_made_offline_follows_the_history() -> None:
    """A delete request made while the master was down is sent live and ends the session."""
    store = KeptStore()
    first = await start_master(store)
    port = first.ws_port
    agent = RawpClient(first.ws_url, SID, role="client", token=API_KEY, create=True, backoff=FAST)
    second: Master | None = None
    try:
        await agent.connect()
        turn = await agent.turn_start()
        await wait_until(lambda: logged(store, SID, [turn]), what="turn start logged")
        await first.stop()
        await agent.wait_status(*OFFLINE, timeout=10)
        await agent.text_delta("t1", "bye")
        await agent.delete()
        second = await start_master(store, ws_port=port)
        frames = [frame async for frame in agent]
        assert isinstance(frames[-1], F.Deleted)
        assert frames[-1].payload.deleted_by == "client"
        await wait_until(lambda: store.is_deleted(SID), what="the session is deleted")
        assert agent.status is ConnectionStatus.CLOSED
    finally:
        await agent.close()
        for master in (first, second):
            if master is not None:
                await master.stop()


# --- restore after an app restart --------------------------------------------------------------


def saved_files(directory: Path) -> list[str]:
    """The names of the files in ``directory``."""
    return sorted(p.name for p in directory.iterdir())


async def test_restored_edge_finalizes_then_unfinalizes_on_reattach(tmp_path: Path) -> None:
    """§7.8.2: the restored view is finalized; the reattach's backlog undoes it (§7.8.3)."""
    master = await start_master()
    path = tmp_path / "edge.json"
    agent = RawpClient(master.ws_url, SID, role="client", token=API_KEY, create=True, backoff=FAST)
    edge = RawpClient(
        master.ws_url, SID, role="edge", token=API_KEY, from_start=True, state_path=path
    )
    restored: RawpClient | None = None
    try:
        await agent.connect()
        await edge.connect()
        turn = await agent.turn_start()
        await agent.text_delta("t1", "Working")
        await agent.tool_request("c1", "run_tests", {})
        ask = await agent.interaction_request("i1", "confirmation", "Deploy?", ["yes", "no"])
        await wait_until(lambda: edge.view.has_seen(ask.message_id), what="edge saw the question")
        await edge.close()  # the app quits; close() persists the state
        assert saved_files(tmp_path) == ["edge.json"]  # renamed into place, no temp left

        restored = RawpClient.restore(path, token=API_KEY, backoff=FAST)
        view = restored.view
        assert view.finalized_locally
        assert view.status == "idle"
        turn_b = next(b for b in view.blocks if isinstance(b, TurnBlock))
        assert turn_b.synthetic
        assert turn_b.stop_reason == "disconnected"
        call = next(b for b in view.blocks if isinstance(b, ToolCallBlock))
        assert (call.status, call.output, call.synthetic) == ("cancelled", CONNECTION_LOST, True)
        question = next(b for b in view.blocks if isinstance(b, InteractionBlock))
        assert question.status == "discarded"

        await agent.tool_result("c1", "ok", "all green")
        await agent.text_delta("t1", " on it")
        await agent.text_done("t1")
        await agent.turn_end(turn.payload.turn_id)
        last = await agent.usage(input_tokens=1, output_tokens=1)
        await restored.connect()
        await wait_until(lambda: restored.view.has_seen(last.message_id), what="restored caught up")
        view = restored.view
        assert not view.finalized_locally
        assert not any(getattr(b, "synthetic", False) for b in view.blocks)
        question = next(b for b in view.blocks if isinstance(b, InteractionBlock))
        assert question.status == "pending"  # the real state: nobody answered
        assert view.status == "requires_action"
        assert_view_matches_log(view, await master.store.read(SID))
    finally:
        await agent.close()
        await edge.close()
        if restored is not None:
            await restored.close()
        await master.stop()


async def test_restored_agent_sends_its_unsent_frames(tmp_path: Path) -> None:
    """An agent restarted while the master was down resumes its turn; nothing is lost."""
    store = KeptStore()
    first = await start_master(store)
    port = first.ws_port
    path = tmp_path / "agent.json"
    agent = RawpClient(
        first.ws_url, SID, role="client", token=API_KEY, create=True, state_path=path, backoff=FAST
    )
    restored: RawpClient | None = None
    second: Master | None = None
    try:
        await agent.connect()
        turn = await agent.turn_start()
        sent: list[F.Frame] = [turn, await agent.text_delta("t1", "Hel")]
        await wait_until(lambda: logged(store, SID, sent), what="live frames")
        await first.stop()
        await agent.wait_status(*OFFLINE, timeout=10)
        sent.append(await agent.text_delta("t1", "lo"))
        await agent.close()  # the agent process stops; its unsent frame is in the file

        restored = RawpClient.restore(path, token=API_KEY, backoff=FAST)
        assert restored.buffered == 1
        assert restored.view.finalized_locally
        second = await start_master(store, ws_port=port)
        await restored.connect()
        sent.append(await restored.text_done("t1"))
        sent.append(await restored.turn_end(turn.payload.turn_id))
        sent.append(await restored.usage(input_tokens=3, output_tokens=4))
        await wait_until(lambda: logged(store, SID, sent), what="all frames")
        entries = await store.read(SID)
        assert client_frame_ids(entries) == [f.message_id for f in sent]
        assert not restored.view.finalized_locally
        assert snapshot(restored.view.state) == snapshot(replayed_view(SID, entries).state)
        session = second.hub.sessions[SID]
        assert snapshot(session.state) == snapshot(replayed_view(SID, entries).state)
        assert session.state.turns_completed == 1
    finally:
        await agent.close()
        if restored is not None:
            await restored.close()
        for master in (first, second):
            if master is not None:
                await master.stop()


# --- random drops (Hypothesis) -----------------------------------------------------------------


def _rehome(frame: F.Frame) -> F.Frame:
    """A strategies frame moved into this test's session, with a fresh message id."""
    payload = frame.payload  # type: ignore[attr-defined]
    if isinstance(frame, F.Renamed | F.Deleted):
        payload = msgspec.structs.replace(payload, session_id=SID)
    return msgspec.structs.replace(
        frame,
        session_id=SID,
        message_id=codec.new_message_id(),
        timestamp=codec.now(),
        payload=payload,
    )


async def _drops_scenario(stream: S.Stream, edge_drops: set[int], agent_drops: set[int]) -> None:
    master = await start_master(reattach_window_s=30.0)
    agent = RawpClient(master.ws_url, SID, role="client", token=API_KEY, create=True, backoff=FAST)
    user = RawpClient(master.ws_url, SID, role="edge", token=API_KEY, backoff=FAST)
    edge = RawpClient(master.ws_url, SID, role="edge", token=API_KEY, backoff=FAST, from_start=True)
    try:
        await agent.connect()
        await user.connect()
        await edge.connect()
        sent: list[F.Frame] = []
        for index, (frame, role) in enumerate(stream):
            if index in edge_drops:
                edge.abort_connection()
            if index in agent_drops:
                agent.abort_connection()
            moved = _rehome(frame)
            if role == "client":
                sent.append(await agent.post(moved))
            else:
                await user.post(moved)
        store = master.store
        await agent.wait_status(ConnectionStatus.CONNECTED, timeout=10)
        # A last frame on the settled connection: once it is logged, so is the history before it.
        sent.append(await agent.error("e2e_marker", "the scenario is over"))
        await wait_until(lambda: logged(store, SID, sent), what="every agent frame logged")
        await edge.wait_status(ConnectionStatus.CONNECTED, timeout=10)
        await wait_until(lambda: caught_up(edge.view, store, edge.participant_id), what="edge")
        await wait_until(
            lambda: caught_up(agent.view, store, agent.participant_id, "client"), what="agent"
        )
        entries = await store.read(SID)
        # Notes §8: (1) every client frame exactly once, in production order ...
        assert client_frame_ids(entries) == [f.message_id for f in sent]
        # ... (3) the edge connected throughout (drops included) = a replay from seq 1 ...
        assert_view_matches_log(edge.view, entries)
        # ... and the master's live state is the replay too.
        replayed = replayed_view(SID, entries)
        assert snapshot(master.hub.sessions[SID].state) == snapshot(replayed.state)
        assert edge.view.skipped == replayed.skipped
        # The agent's own view (its frames folded as they left) reaches the same state.
        assert snapshot(agent.view.state) == snapshot(replayed.state)
        assert log_frames(entries)
    finally:
        await agent.close()
        await user.close()
        await edge.close()
        await master.stop()


def _no_answers(stream: S.Stream) -> S.Stream:
    # An edge may answer only a question the master has logged; across two sockets the order
    # is not ours to choose, so the drawn streams leave the answering out.
    return [(f, r) for f, r in stream if not isinstance(f, F.InteractionResponse)]


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data(), stream=S.streams(max_steps=30).map(_no_answers))
def test_edge_view_equals_log_replay_after_random_drops(
    data: st.DataObject, stream: S.Stream
) -> None:
    """Edge and agent drop at Hypothesis-chosen points; the edge's view equals a replay."""
    points = st.sets(st.integers(0, max(0, len(stream) - 1)), max_size=3)
    edge_drops = data.draw(points, label="edge drops before frame")
    agent_drops = data.draw(points, label="agent drops before frame")
    asyncio.run(_drops_scenario(stream, edge_drops, agent_drops))


# --- rawp demo --once, followed by rawp tail ---------------------------------------------------


async def _read_line_with(stream: asyncio.StreamReader, pattern: str, within: float) -> str:
    async with asyncio.timeout(within):
        while True:
            line = (await stream.readline()).decode()
            if not line:
                raise AssertionError(f"the demo ended before printing {pattern!r}")
            if re.search(pattern, line):
                return line


async def test_demo_once_and_tail_show_the_session() -> None:
    """`rawp demo --once` prints a dashboard link, withdraws unanswered questions and answers
    its wake with a turn; `rawp tail` (token from RAWP_API_KEY) follows its session to the end,
    turns numbered from 1."""
    demo = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rawp.cli",
        "demo",
        "--once",
        "--turns",
        "3",
        "--ws-port",
        "0",
        "--http-port",
        "0",
        "--api-key",
        API_KEY,
        "--session",
        "demo-e2e",
        "--pace",
        "0",
        "--pause",
        "0",
        "--interaction-timeout",
        "0.2",
        "--wait-for-edge",
        "30",
        "--wake-after",
        "0.5",
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    tail: asyncio.subprocess.Process | None = None
    try:
        assert demo.stdout is not None
        link = await _read_line_with(demo.stdout, r"dashboard\s+http://", 30)
        assert f"/?token={API_KEY}#/s/demo-e2e" in link
        line = await _read_line_with(demo.stdout, r"follow it\s+rawp tail", 30)
        url = re.search(r"--ws-url (\S+)", line)
        assert url is not None
        assert f"--token {API_KEY}" in line
        tail = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "rawp.cli",
            "tail",
            "demo-e2e",
            "--ws-url",
            url.group(1),
            "--from-start",
            "--timeout",
            "60",
            cwd=REPO,
            env={**os.environ, "RAWP_API_KEY": API_KEY},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(tail.communicate(), 90)
        text = out.decode()
        assert tail.returncode == 0, err.decode()
        for expected in (
            "following session demo-e2e",
            "user: The CLI ignores --verbose",
            "── turn 1 · code ──",
            "  thinking: The flag is probably parsed",
            "  → grep ",
            "  ← grep ok: src/cli.py:18",
            "  ← run_tests error: 1 failed",
            "  ? confirmation: Apply the patch to src/cli.py?",
            "  ✗ question withdrawn: no answer within 0.2 s",
            "  assistant: Found it:",
            "── turn 3 ended: end_turn, 1 tool call(s) ──",
            "  usage: ",
            "  ⟲ context compacted (auto)",
            "⏰ asked to be woken at ",
            "⏰ woken: check whether CI passed on the --verbose fix (asked for ",
            "  ← ci_status ok",
            "── turn 4 ended: end_turn, 1 tool call(s) ──",
            "× session deleted (user_request, by client)",
        ):
            assert expected in text, f"{expected!r} missing from:\n{text}"
        assert text.count("  usage: ") == 4  # three turns and the one answering the wake
        demo_out, demo_err = await asyncio.wait_for(demo.communicate(), 60)
        assert demo.returncode == 0, demo_err.decode()
        assert "session demo-e2e deleted" in demo_out.decode()
    finally:
        for process in (tail, demo):
            if process is not None and process.returncode is None:
                process.kill()
                with contextlib.suppress(Exception):
                    await process.wait()
