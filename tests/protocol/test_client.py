"""The client library: handshake, typed helpers, acks, reconnect policy, persistence."""

from __future__ import annotations

import ast
import os
import random
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from protocol import codec
from protocol import frames as F
from protocol.client import (
    Backoff,
    ClientClosed,
    ConnectionStatus,
    RawpClient,
    ReconnectExhausted,
    load_snapshot,
    save_snapshot,
)
from protocol.errors import BadCredential, DirectionError, NoSuchSession
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.support.clients import FAST, client_frame_ids, start_master, wait_until

SID = "s-client"
PROTOCOL_DIR = Path(__file__).resolve().parents[2] / "protocol"


@pytest.fixture
async def master() -> AsyncIterator[Master]:
    """An in-process master on free loopback ports."""
    started = await start_master()
    yield started
    await started.stop()


def agent_for(master: Master, **options: Any) -> RawpClient:
    """An agent (role client) that creates the session."""
    return RawpClient(
        master.ws_url, SID, role="client", token=API_KEY, create=True, backoff=FAST, **options
    )


def edge_for(master: Master, **options: Any) -> RawpClient:
    """An edge (UI) on the session."""
    return RawpClient(master.ws_url, SID, role="edge", token=API_KEY, backoff=FAST, **options)


# --- the sans-I/O boundary ---------------------------------------------------------------------


def test_only_the_client_modules_import_asyncio_or_websockets() -> None:
    """protocol/ stays sans-I/O: asyncio and websockets are imported by the client adapter's
    modules alone (client.py and its parts, and ``rawp tail``, which runs the client)."""
    offenders = []
    for path in sorted(PROTOCOL_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            if any(n.split(".")[0] in {"asyncio", "websockets"} for n in names):
                offenders.append(path.name)
    assert sorted(set(offenders)) == [
        "client.py",
        "client_connect.py",
        "client_incoming.py",
        "client_link.py",
        "client_status.py",
        "tail.py",
    ]


# --- reconnect policy --------------------------------------------------------------------------


def test_backoff_is_exponential_with_full_jitter_and_bounded() -> None:
    """Attempt n waits uniform(0, min(maximum, initial * multiplier**n)) seconds."""
    backoff = Backoff(initial=0.5, maximum=8.0, multiplier=2.0)
    assert [backoff.ceiling(n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert backoff.ceiling(10_000) == 8.0
    rng = random.Random(7)
    delays = [backoff.delay(3, rng) for _ in range(500)]
    assert all(0.0 <= d <= 4.0 for d in delays)
    assert min(delays) < 0.5
    assert max(delays) > 3.5  # full jitter spans the whole range
    with pytest.raises(ValueError, match="max_attempts"):
        Backoff(max_attempts=0)


async def test_unreachable_master_gives_up_after_max_attempts() -> None:
    """With a bounded policy the client stops retrying and says why."""
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = RawpClient(
        f"ws://127.0.0.1:{port}/v1/ws",
        SID,
        role="edge",
        token=API_KEY,
        backoff=Backoff(initial=0.01, maximum=0.02, max_attempts=3),
    )
    with pytest.raises(ReconnectExhausted, match="3 attempt"):
        await client.connect()
    assert client.status is ConnectionStatus.CLOSED


# --- handshake ---------------------------------------------------------------------------------


async def test_refusals_are_raised_not_retried(master: Master) -> None:
    """A bad credential (4401) or an unknown session (4404) ends the attempt at once."""
    bad = RawpClient(master.ws_url, SID, role="client", token="nope", create=True, backoff=FAST)
    with pytest.raises(BadCredential):
        await bad.connect()
    missing = edge_for(master)
    with pytest.raises(NoSuchSession):
        await missing.connect()


async def test_typed_helpers_fill_the_envelope(master: Master) -> None:
    """Each helper sends a complete envelope the master stamps and relays."""
    async with agent_for(master) as agent, edge_for(master) as edge:
        turn = await agent.turn_start(mode="code")
        assert turn.payload.turn_index == 0
        await agent.text_delta("t1", "hi")
        await agent.text_done("t1", "hi")
        await agent.turn_end(turn.payload.turn_id)
        await agent.usage(input_tokens=3, output_tokens=4, turn_id=turn.payload.turn_id)
        second = await agent.turn_start()
        assert second.payload.turn_index == 1  # indexes follow on their own
        received: list[F.Frame | F.GenericFrame] = []
        async for frame in edge:
            received.append(frame)
            if frame.message_id == second.message_id:
                break
        agent_frames = [f for f in received if f.sender is not None and f.sender.role == "client"]
        assert [f.type for f in agent_frames] == [
            "session.turn.start",
            "agent.text.delta",
            "agent.text.done",
            "session.turn.end",
            "session.usage",
            "session.turn.start",
        ]
        assert all(f.session_id == SID and f.seq is not None for f in agent_frames)
        assert isinstance(received[0], F.Welcome)
        # One run at a time: the user's next message waits for the open turn to end.
        await agent.turn_end(second.payload.turn_id)
        await agent.usage(input_tokens=1, output_tokens=1, turn_id=second.payload.turn_id)
        answer = await edge.user_message("thanks")
        got = await agent.receive(timeout=5)
        while got is not None and got.message_id != answer.message_id:
            got = await agent.receive(timeout=5)
        assert isinstance(got, F.UserMessage)
        assert got.payload.text == "thanks"


async def test_a_role_may_send_only_its_own_frames(master: Master) -> None:
    """An edge cannot start turns; an agent cannot answer interactions (notes §4)."""
    async with agent_for(master) as agent, edge_for(master) as edge:
        with pytest.raises(DirectionError):
            await edge.turn_start()
        with pytest.raises(DirectionError):
            await agent.interaction_response("i1", True)
        with pytest.raises(DirectionError):
            await agent.send(
                F.Ack(payload=F.AckPayload(last_seq=0), **_envelope())  # connection frames too
            )


async def test_acks_move_the_masters_cursor(master: Master) -> None:
    """connection.ack after every N frames received keeps the server-side cursor."""
    async with agent_for(master) as agent, edge_for(master, ack_every=2) as edge:
        for n in range(4):
            await agent.text_delta("t1", str(n))
        await wait_until(lambda: edge.cursor >= 5, what="edge received the deltas")
        session = master.hub.sessions[SID]
        participant = session.participants[edge.participant_id or ""]
        await wait_until(lambda: participant.acked == edge.cursor, what="master saw the ack")


async def test_deletion_ends_the_iteration_without_reconnecting(master: Master) -> None:
    """session.deleted is the last frame; the stream ends and sending is refused."""
    agent = agent_for(master)
    edge = edge_for(master)
    await agent.connect()
    await edge.connect()
    await agent.delete()
    frames = [frame async for frame in edge]
    assert isinstance(frames[-1], F.Deleted)
    assert frames[-1].payload.deleted_by == "client"
    assert edge.status is ConnectionStatus.CLOSED
    with pytest.raises(ClientClosed):
        await edge.user_message("anyone?")
    agent_frames = [frame async for frame in agent]  # the agent's stream ends too
    assert isinstance(agent_frames[-1], F.Deleted)
    await agent.close()
    await edge.close()


async def test_frames_in_flight_at_a_drop_are_logged_once(master: Master) -> None:
    """Frames written to a socket that died are resent unless the master has them."""
    async with agent_for(master) as agent:
        turn = await agent.turn_start()
        sent: list[F.Frame] = [turn]
        for round_ in range(5):
            sent.append(await agent.text_delta("t1", f"{round_}a"))
            agent.abort_connection()
            sent.append(await agent.text_delta("t1", f"{round_}b"))
            await agent.wait_status(ConnectionStatus.CONNECTED, timeout=10)
        store = master.store

        async def all_logged() -> bool:
            ids = set(client_frame_ids(await store.read(SID)))
            return all(f.message_id in ids for f in sent)

        await wait_until(all_logged, what="every delta logged")
        assert client_frame_ids(await store.read(SID)) == [f.message_id for f in sent]


async def test_edge_frames_made_offline_leave_after_the_reattach(master: Master) -> None:
    """An edge may not send histories: its buffered frames go out one by one, in order."""
    async with agent_for(master) as agent, edge_for(master) as edge:
        edge.abort_connection()
        first = await edge.user_message("one")
        second = await edge.user_message("two")
        await edge.wait_status(ConnectionStatus.CONNECTED, timeout=10)
        texts: list[str] = []
        async for frame in agent:
            if isinstance(frame, F.UserMessage):
                texts.append(frame.payload.text)
            if frame.message_id == second.message_id:
                break
        assert texts == ["one", "two"]
        assert first.message_id != second.message_id


# --- persistence -------------------------------------------------------------------------------


def _envelope() -> dict[str, object]:
    return {"message_id": codec.new_message_id(), "session_id": SID, "timestamp": codec.now()}


def test_snapshot_replaces_the_file_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash during a save leaves the previous file whole and no temp file behind."""
    client = RawpClient("ws://127.0.0.1:9/v1/ws", SID, role="edge", token=API_KEY)
    path = tmp_path / "state.json"
    save_snapshot(path, client.snapshot())
    before = path.read_bytes()
    assert load_snapshot(path).session_id == SID

    def crash(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    client.participant_id = "p-changed"
    with pytest.raises(OSError, match="disk full"):
        save_snapshot(path, client.snapshot())
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


async def test_outgoing_buffer_survives_a_restart_with_its_counters(tmp_path: Path) -> None:
    """DROP that already lost a frame keeps losing after a restore; counts stay exact."""
    path = tmp_path / "agent.json"
    request = F.BufferRequest(policy="DROP", capacity_bytes=600)
    agent = RawpClient(
        "ws://127.0.0.1:9/v1/ws", SID, role="client", token=API_KEY, buffer=request, state_path=path
    )
    for n in range(4):  # never connected: everything is buffered
        await agent.text_delta("t1", "x" * 150 + str(n))
    before = agent.buffer_status()
    assert before.truncated
    agent.save()
    restored = RawpClient.restore(path, token=API_KEY, buffer=request)
    assert restored.buffer_status() == before
    assert restored.buffered == agent.buffered
    await restored.text_delta("t1", "y")  # would fit, but DROP never leaves a gap
    after = restored.buffer_status()
    assert after.lost_frame_count == (before.lost_frame_count or 0) + 1
    assert restored.buffered == agent.buffered
