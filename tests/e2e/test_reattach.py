"""Reattach: takeover and fencing, presence, cursors, the RING / DROP / NONE backlog (§7)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.e2e.util import detached, is_presence, logged, new_session, next_frame, wait_until
from tests.support.wire import Peer

# --- takeover and fencing ----------------------------------------------------------------


async def test_client_takeover_fences_the_old_connection(master: Master) -> None:
    """Same participant_id: the old socket is closed 4409, its later frames are not accepted."""
    sid = "s-re-takeover"
    old, (edge,) = await new_session(master, sid)
    await old.send("agent.state", {"state": "thinking"})
    assert (await next_frame(edge))["type"] == "agent.state"
    new = await Peer.open(master.ws_url, sid, token=API_KEY, participant_id=old.participant_id)
    assert new.participant_id == old.participant_id
    assert new.welcome["payload"]["generation"] == 2
    assert new.welcome["payload"]["resumed"] is True
    stale = None
    try:
        stale = await old.send("agent.state", {"state": "responding"})
    except Exception:
        pass  # already closed by the master: also fine
    assert await old.closed_with() == 4409
    assert old.ws.close_reason
    assert "superseded" in old.ws.close_reason
    fresh = await new.send("agent.state", {"state": "tool_calling"})
    # Nothing in between: no stale frame, no presence, no finalization for a takeover.
    got = await edge.recv()
    assert got["message_id"] == fresh["message_id"]
    assert got["sender"]["participant_id"] == old.participant_id
    ids = {f["message_id"] for f in await logged(master, sid)}
    if stale is not None:
        assert stale["message_id"] not in ids
    assert not any((f.get("metadata") or {}).get("synthetic") for f in await logged(master, sid))


async def test_takeover_sends_no_presence_and_no_finalization(master: Master) -> None:
    """The edge sees nothing of a client takeover mid-turn; the turn stays open."""
    sid = "s-re-takeover-quiet"
    old, (edge,) = await new_session(master, sid)
    await old.send(
        "session.turn.start", {"turn_id": "0e4f2f47-9a57-4a43-9b56-6a1f0f8f5a11", "turn_index": 0}
    )
    await next_frame(edge)
    new = await Peer.open(master.ws_url, sid, token=API_KEY, participant_id=old.participant_id)
    assert await old.closed_with() == 4409
    end = await new.send(
        "session.turn.end",
        {"turn_id": "0e4f2f47-9a57-4a43-9b56-6a1f0f8f5a11", "stop_reason": "end_turn"},
    )
    got = await edge.recv()
    assert got["message_id"] == end["message_id"]


async def test_edge_takeover(master: Master) -> None:
    """An edge reattaching with its participant_id supersedes its older socket (4409)."""
    sid = "s-re-edge-takeover"
    client, (edge,) = await new_session(master, sid)
    again = await Peer.open(
        master.ws_url, sid, role="edge", token=API_KEY, participant_id=edge.participant_id
    )
    assert again.welcome["payload"]["generation"] == 2
    assert await edge.closed_with() == 4409
    sent = await client.send("agent.state", {"state": "thinking"})
    got = await next_frame(again)
    if got["type"] == "session.history":
        got = await next_frame(again)
    assert got["message_id"] == sent["message_id"]


async def test_generation_counts_every_attach(master: Master) -> None:
    """generation increases with each attach of one participant."""
    sid = "s-re-gen"
    client = (await new_session(master, sid, edges=0))[0]
    pid = client.participant_id
    for expected in (2, 3, 4):
        await client.close()
        client = await Peer.open(master.ws_url, sid, token=API_KEY, participant_id=pid)
        assert client.welcome["payload"]["generation"] == expected


# --- presence ----------------------------------------------------------------------------


async def test_presence_attached_detached_broadcast_but_not_to_its_subject(master: Master) -> None:
    """Presence of an edge goes to everyone else; the edge never hears about itself."""
    sid = "s-re-presence"
    client, (edge1,) = await new_session(master, sid)
    edge2 = await Peer.open(master.ws_url, sid, role="edge", token=API_KEY)
    for peer in (client, edge1):
        got = await peer.recv()
        assert got["type"] == "session.presence"
        assert got["payload"] == {
            "participant_id": edge2.participant_id,
            "role": "edge",
            "state": "attached",
        }
        assert got["sender"]["role"] == "master"
    await edge2.close()
    for peer in (client, edge1):
        got = await peer.recv()
        assert got["payload"]["state"] == "detached"
        assert got["payload"]["participant_id"] == edge2.participant_id
    back = await Peer.open(
        master.ws_url, sid, role="edge", token=API_KEY, participant_id=edge2.participant_id
    )
    assert back.welcome["payload"]["resumed"] is True
    for peer in (client, edge1):
        got = await peer.recv()
        assert got["payload"]["state"] == "attached"
    history = await back.recv()  # known participant id: a backlog follows the welcome
    assert history["type"] == "session.history"
    assert not any(
        f["type"] == "session.presence" and f["payload"]["participant_id"] == back.participant_id
        for f in history["payload"]["frames"]
    )
    sentinel = await client.send("agent.state", {"state": "thinking"})
    assert (await back.recv())["message_id"] == sentinel["message_id"]


async def test_client_detach_presence_reaches_edges(master: Master) -> None:
    """A client's detach is announced to the edges as presence detached, role client."""
    client, (edge,) = await new_session(master, "s-re-client-presence")
    await client.close()
    got = await edge.recv()
    assert got["payload"] == {
        "participant_id": client.participant_id,
        "role": "client",
        "state": "detached",
    }


# --- backlogs ----------------------------------------------------------------------------

DELTAS = [120, 700, 40, 330, 510, 90, 260]  # characters of text per client frame


async def offline_backlog(master: Master, sid: str) -> tuple[Peer, int, list[bytes]]:
    """Edge A misses: its own frame, presence about itself and others, and client frames.

    Returns A (detached), A's cursor, and the bytes live delivery would have sent A after it,
    as a witness edge attached throughout received them.
    """
    client, (edge_a, witness) = await new_session(master, sid, edges=2)
    cursor = edge_a.received[-1]["seq"]  # the witness's attach: the last thing A saw
    await edge_a.send("user.message", {"text": "own frame, never sent back"})
    await edge_a.close()
    await detached(master, sid, edge_a)
    other = await Peer.open(master.ws_url, sid, role="edge", token=API_KEY)
    await other.close()
    for n, size in enumerate(DELTAS):
        await client.send("agent.text.delta", {"block_id": "b1", "delta": chr(97 + n) * size})
    await witness.recv_until(
        lambda f: (
            f["type"] == "agent.text.delta"
            and f["payload"]["delta"].startswith(chr(97 + len(DELTAS) - 1))
        )
    )
    expected: list[bytes] = []
    for raw in witness.raw:
        frame = json.loads(raw)
        if frame.get("seq", 0) <= cursor:
            continue
        if frame["sender"]["participant_id"] == edge_a.participant_id:
            continue
        if is_presence(frame) and frame["payload"]["participant_id"] == edge_a.participant_id:
            continue
        expected.append(raw.encode())
    kinds = [json.loads(b)["type"] for b in expected]
    assert kinds == ["session.presence", "session.presence"] + ["agent.text.delta"] * len(DELTAS)
    return edge_a, cursor, expected


def ring(sizes: list[int], capacity: int) -> tuple[int, int]:
    """(kept, high watermark) of a RING buffer fed ``sizes`` oldest first."""
    held: list[int] = []
    peak = 0
    for size in sizes:
        if size > capacity:
            held = []
            continue
        held.append(size)
        while sum(held) > capacity:
            held.pop(0)
        peak = max(peak, sum(held))
    return len(held), peak


def drop(sizes: list[int], capacity: int) -> tuple[int, int]:
    """(kept, high watermark) of a DROP buffer fed ``sizes`` oldest first."""
    total = 0
    for kept, size in enumerate(sizes):
        if total + size > capacity:
            return kept, total
        total += size
    return len(sizes), total


async def reattach(
    master: Master, sid: str, edge: Peer, buffer: dict[str, Any] | None, **resume: Any
) -> tuple[Peer, dict[str, Any]]:
    back = await Peer.open(
        master.ws_url,
        sid,
        role="edge",
        token=API_KEY,
        participant_id=edge.participant_id,
        buffer=buffer,
        resume=resume or None,
    )
    history = await back.recv()
    assert history["type"] == "session.history"
    assert history["sender"] == {"role": "master", "participant_id": "m-test"}
    assert "seq" not in history
    return back, history


def frames_of(history: dict[str, Any]) -> list[dict[str, Any]]:
    return list(history["payload"]["frames"])


@pytest.mark.parametrize("slack", [0, 1, 37])
async def test_ring_keeps_the_newest_run_that_fits(master: Master, slack: int) -> None:
    """RING: exactly the newest frames whose bytes fit; exact lost count and high watermark."""
    sid = f"s-re-ring-{slack}"
    edge, cursor, expected = await offline_backlog(master, sid)
    sizes = [len(b) for b in expected]
    capacity = sum(sizes[-3:]) + slack  # the newest three fit, the fourth does not
    assert sizes[-4] > slack
    _, history = await reattach(
        master, sid, edge, {"policy": "RING", "capacity_bytes": capacity}, last_seq=cursor
    )
    kept, peak = ring(sizes, capacity)
    assert kept == 3
    assert frames_of(history) == [json.loads(b) for b in expected[-3:]]
    assert history["payload"]["buffer_status"] == {
        "policy_applied": "RING",
        "truncated": True,
        "lost_frame_count": len(expected) - 3,
        "buffer_high_watermark": peak,
    }
    assert peak <= capacity


@pytest.mark.parametrize("slack", [0, 1, 37])
async def test_drop_keeps_the_oldest_run_that_fits(master: Master, slack: int) -> None:
    """DROP: exactly the oldest frames whose bytes fit, never a gap; exact counts."""
    sid = f"s-re-drop-{slack}"
    edge, cursor, expected = await offline_backlog(master, sid)
    sizes = [len(b) for b in expected]
    capacity = sum(sizes[:4]) + slack
    assert sizes[4] > slack
    _, history = await reattach(
        master, sid, edge, {"policy": "DROP", "capacity_bytes": capacity}, last_seq=cursor
    )
    assert drop(sizes, capacity) == (4, sum(sizes[:4]))
    assert frames_of(history) == [json.loads(b) for b in expected[:4]]
    assert history["payload"]["buffer_status"] == {
        "policy_applied": "DROP",
        "truncated": True,
        "lost_frame_count": len(expected) - 4,
        "buffer_high_watermark": sum(sizes[:4]),
    }


async def test_drop_does_not_skip_a_big_frame_to_keep_later_small_ones(master: Master) -> None:
    """DROP stops at the first frame that does not fit even if later, smaller ones would."""
    sid = "s-re-drop-gap"
    edge, cursor, expected = await offline_backlog(master, sid)
    sizes = [len(b) for b in expected]
    # Room for the first three frames and for the small frame after the big fourth one.
    capacity = sum(sizes[:3]) + sizes[4]
    assert sizes[3] > sizes[4]
    _, history = await reattach(
        master, sid, edge, {"policy": "DROP", "capacity_bytes": capacity}, last_seq=cursor
    )
    kept, peak = drop(sizes, capacity)
    assert kept == 3
    assert frames_of(history) == [json.loads(b) for b in expected[:kept]]
    assert history["payload"]["buffer_status"]["lost_frame_count"] == len(expected) - kept
    assert history["payload"]["buffer_status"]["buffer_high_watermark"] == peak


@pytest.mark.parametrize("policy", ["RING", "DROP"])
async def test_backlog_that_fits_is_exactly_what_live_delivery_sent(
    master: Master, policy: str
) -> None:
    """With room for everything the backlog is live delivery: no own frames, no self-presence."""
    sid = f"s-re-all-{policy}"
    edge, cursor, expected = await offline_backlog(master, sid)
    total = sum(len(b) for b in expected)
    _, history = await reattach(
        master, sid, edge, {"policy": policy, "capacity_bytes": total}, last_seq=cursor
    )
    assert frames_of(history) == [json.loads(b) for b in expected]
    assert history["payload"]["buffer_status"] == {
        "policy_applied": policy,
        "truncated": False,
        "lost_frame_count": 0,
        "buffer_high_watermark": total,
    }
    log = await logged(master, sid)
    anchor = next(f for f in log if f["seq"] == cursor)
    assert history["payload"]["last_message_id"] == anchor["message_id"]
    assert history["payload"]["last_sync_timestamp"] == anchor["timestamp"]


async def test_ring_frame_larger_than_capacity_loses_everything_before(master: Master) -> None:
    """RING never keeps older frames across a newer one that could not fit (no gap)."""
    sid = "s-re-ring-big"
    edge, cursor, expected = await offline_backlog(master, sid)
    sizes = [len(b) for b in expected]
    biggest = sizes.index(max(sizes))
    capacity = max(sizes) - 1
    _, history = await reattach(
        master, sid, edge, {"policy": "RING", "capacity_bytes": capacity}, last_seq=cursor
    )
    kept, peak = ring(sizes, capacity)
    got = frames_of(history)
    assert got == [json.loads(b) for b in expected[len(expected) - kept :]]
    assert all(f["seq"] > json.loads(expected[biggest])["seq"] for f in got)
    assert history["payload"]["buffer_status"]["lost_frame_count"] == len(expected) - kept
    assert history["payload"]["buffer_status"]["buffer_high_watermark"] == peak


async def test_none_sends_no_frames_and_counts_the_backlog(master: Master) -> None:
    """NONE: no frames; truncated because the backlog was not empty; lost = its length."""
    sid = "s-re-none"
    edge, cursor, expected = await offline_backlog(master, sid)
    _, history = await reattach(
        master, sid, edge, {"policy": "NONE", "capacity_bytes": 0}, last_seq=cursor
    )
    assert frames_of(history) == []
    assert history["payload"]["buffer_status"] == {
        "policy_applied": "NONE",
        "truncated": True,
        "lost_frame_count": len(expected),
        "buffer_high_watermark": 0,
    }


async def test_none_with_empty_backlog_is_not_truncated(master: Master) -> None:
    """NONE with nothing missed: not truncated, lost 0."""
    sid = "s-re-none-empty"
    _client, (edge,) = await new_session(master, sid)
    cursor = edge.welcome["payload"]["session"]["head_seq"]
    _again, history = await reattach(
        master, sid, edge, {"policy": "NONE", "capacity_bytes": 0}, last_seq=cursor
    )
    assert await edge.closed_with() == 4409
    assert history["payload"]["buffer_status"] == {
        "policy_applied": "NONE",
        "truncated": False,
        "lost_frame_count": 0,
        "buffer_high_watermark": 0,
    }


async def test_server_side_cursor_without_resume(master: Master) -> None:
    """A participant_id without resume gets the backlog from what was written to its socket."""
    sid = "s-re-server-cursor"
    edge, _cursor, expected = await offline_backlog(master, sid)
    _, history = await reattach(master, sid, edge, {"policy": "RING", "capacity_bytes": 1 << 20})
    assert frames_of(history) == [json.loads(b) for b in expected]


async def test_ack_moves_the_server_side_cursor(master: Master) -> None:
    """connection.ack sets the cursor: a reattach without resume starts after the acked seq."""
    sid = "s-re-ack"
    client, (edge,) = await new_session(master, sid)
    sent = []
    for n in range(4):
        sent.append(await client.send("agent.state", {"state": ["thinking", "idle"][n % 2]}))
    got = [await next_frame(edge) for _ in sent]
    acked = got[1]["seq"]
    await edge.send("connection.ack", {"last_seq": acked})
    await wait_until(
        lambda: master.hub.sessions[sid].participants[edge.participant_id].record.cursor == acked
    )
    await edge.close()
    await detached(master, sid, edge)
    _, history = await reattach(master, sid, edge, None)
    assert [f["message_id"] for f in frames_of(history)] == [s["message_id"] for s in sent[2:]]
    log = await logged(master, sid)
    assert not any(f["type"] == "connection.ack" for f in log)


async def test_cursor_zero_replays_from_the_start(master: Master) -> None:
    """resume last_seq 0: every frame, last_message_id "" and the session's creation time."""
    sid = "s-re-zero"
    client, (edge,) = await new_session(master, sid)
    await client.send("agent.state", {"state": "thinking"})
    await next_frame(edge)
    late = await Peer.open(master.ws_url, sid, role="edge", token=API_KEY, resume={"last_seq": 0})
    history = await late.recv()
    log = await logged(master, sid)
    frames = frames_of(history)
    # Everything before the late edge's own attach notice, which is not sent to it.
    assert [f["seq"] for f in frames] == [f["seq"] for f in log][:-1]
    assert history["payload"]["last_message_id"] == ""
    created = client.welcome["payload"]["session"]["created_at"]
    assert history["payload"]["last_sync_timestamp"][:19] == created[:19]
    assert history["payload"]["buffer_status"]["truncated"] is False


async def test_backlog_after_retention_counts_the_trimmed_frames_as_lost(make_master: Any) -> None:
    """Retention trimmed past the cursor: lost = frames trimmed after it, the kept ones sent."""
    master: Master = await make_master(retention=6)
    sid = "s-re-trimmed"
    client, (edge,) = await new_session(master, sid)
    cursor = edge.welcome["payload"]["session"]["head_seq"]
    for i in range(12):
        await client.send("agent.state", {"state": "thinking" if i % 2 else "idle"})
        await next_frame(edge)
    log = await logged(master, sid)
    first_kept = log[0]["seq"]
    assert first_kept > cursor + 1  # the cursor's entry and some after it are gone
    late = await Peer.open(
        master.ws_url, sid, role="edge", token=API_KEY, resume={"last_seq": cursor}
    )
    history = await late.recv()
    status = history["payload"]["buffer_status"]
    assert status["lost_frame_count"] == first_kept - cursor - 1
    assert [f["seq"] for f in frames_of(history)] == [f["seq"] for f in log]
    assert history["payload"]["last_message_id"] == ""  # the cursor's own frame is gone too
    kept = log[2]  # a cursor on a frame the log still holds: nothing lost, its id reported
    again = await Peer.open(
        master.ws_url, sid, role="edge", token=API_KEY, resume={"last_seq": kept["seq"]}
    )
    history = await again.recv()
    assert history["payload"]["buffer_status"]["lost_frame_count"] == 0
    assert history["payload"]["last_message_id"] == kept["message_id"]
    assert frames_of(history)[0]["seq"] == kept["seq"] + 1


async def test_cursor_from_another_log_is_truncated_without_count(master: Master) -> None:
    """A cursor past the head, or naming another frame, is a foreign log: truncated, no count."""
    sid = "s-re-foreign"
    client, (edge,) = await new_session(master, sid)
    await client.send("agent.state", {"state": "thinking"})
    await next_frame(edge)
    late = await Peer.open(
        master.ws_url, sid, role="edge", token=API_KEY, resume={"last_seq": 10_000}
    )
    status = (await late.recv())["payload"]["buffer_status"]
    assert status["truncated"] is True
    assert "lost_frame_count" not in status
    other = await Peer.open(
        master.ws_url,
        sid,
        role="edge",
        token=API_KEY,
        resume={"last_seq": 1, "last_message_id": "not-the-frame-at-seq-1"},
    )
    status = (await other.recv())["payload"]["buffer_status"]
    assert status["truncated"] is True
    assert "lost_frame_count" not in status


async def test_buffer_grant_is_capped_and_remembered(make_master: Any) -> None:
    """The granted capacity is capped by the server; a reattach without buffer keeps the policy."""
    master: Master = await make_master(buffer_capacity=4096)
    sid = "s-re-grant"
    await new_session(master, sid, edges=0)
    edge = await Peer.open(
        master.ws_url,
        sid,
        role="edge",
        token=API_KEY,
        buffer={"policy": "DROP", "capacity_bytes": 1 << 30},
    )
    assert edge.welcome["payload"]["buffer"] == {"policy": "DROP", "capacity_bytes": 4096}
    await edge.close()
    back = await Peer.open(
        master.ws_url, sid, role="edge", token=API_KEY, participant_id=edge.participant_id
    )
    assert back.welcome["payload"]["buffer"] == {"policy": "DROP", "capacity_bytes": 4096}
    plain = await Peer.open(master.ws_url, sid, role="edge", token=API_KEY)
    assert plain.welcome["payload"]["buffer"] == {"policy": "RING", "capacity_bytes": 4096}
