"""A participant may decline presence (docs/protocol.md §5 item 12): none live, none in its
backlog, nothing of its buffer spent on it, the choice kept across reattaches."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.cases.buffers import simulate
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.e2e.util import detached, hello, hello_close_code
from tests.support.clients import start_master, wait_until
from tests.support.wire import Peer


def _types(frames: list[dict[str, Any]]) -> list[str]:
    return [str(f["type"]) for f in frames]


async def _come_and_go(master: Master, session_id: str, times: int) -> None:
    """``times`` edges attach and close, one after another (two presence frames each)."""
    for _ in range(times):
        edge = await Peer.open(master.ws_url, session_id, role="edge", token=API_KEY)
        await edge.close()
        await detached(master, session_id, edge)


async def test_a_declining_edge_gets_no_presence_and_the_others_still_do(master: Master) -> None:
    """The viewer's welcome says presence false and its next frame is the client's, while
    an edge that did not decline hears the other edge come and go."""
    sid = "s-decline-live"
    client = await Peer.open(master.ws_url, sid, token=API_KEY, create=True)
    viewer = await Peer.open(master.ws_url, sid, role="edge", token=API_KEY, presence=False)
    assert viewer.welcome["payload"]["presence"] is False
    watcher = await Peer.open(master.ws_url, sid, role="edge", token=API_KEY)
    assert "presence" not in watcher.welcome["payload"]
    await _come_and_go(master, sid, 1)
    heard = [(await watcher.recv_type("session.presence"))["payload"]["state"] for _ in range(2)]
    assert heard == ["attached", "detached"]
    sent = await client.send("agent.state", {"state": "thinking"})
    got = await viewer.recv_until(lambda f: f.get("message_id") == sent["message_id"])
    assert _types(got) == ["agent.state"]
    for peer in (viewer, watcher, client):
        await peer.close()


async def test_a_reattach_keeps_the_choice_and_its_backlog_has_no_presence(
    master: Master,
) -> None:
    """Reattaching by participant id without saying keeps presence declined: the backlog
    holds the client's frame and none of the presence of the gap; saying true brings it."""
    sid = "s-decline-backlog"
    client = await Peer.open(master.ws_url, sid, token=API_KEY, create=True)
    viewer = await Peer.open(master.ws_url, sid, role="edge", token=API_KEY, presence=False)
    pid = viewer.participant_id
    await viewer.close()
    await detached(master, sid, viewer)
    await _come_and_go(master, sid, 2)
    sent = await client.send("agent.state", {"state": "thinking"})
    again = await Peer.open(master.ws_url, sid, role="edge", token=API_KEY, participant_id=pid)
    assert again.welcome["payload"]["resumed"] is True
    assert again.welcome["payload"]["presence"] is False
    history = await again.recv()
    assert history["type"] == "session.history"
    assert [f["message_id"] for f in history["payload"]["frames"]] == [sent["message_id"]]
    assert history["payload"]["buffer_status"]["lost_frame_count"] == 0
    await again.close()
    await detached(master, sid, again)
    taking = await Peer.open(
        master.ws_url,
        sid,
        role="edge",
        token=API_KEY,
        participant_id=pid,
        presence=True,
        resume={"last_seq": 0},
    )
    assert "presence" not in taking.welcome["payload"]
    replay = (await taking.recv())["payload"]["frames"]
    changes = [
        (f["payload"]["participant_id"], f["payload"]["state"])
        for f in replay
        if f["type"] == "session.presence"
    ]
    # the client, then the two edges of the gap; never its own (notes §15.4)
    assert changes[0] == (client.participant_id, "attached")
    assert [state for _, state in changes[1:]] == ["attached", "detached"] * 2
    assert pid not in {who for who, _ in changes}
    await taking.close()
    await client.close()


async def test_declined_presence_takes_nothing_of_the_reattach_buffer(master: Master) -> None:
    """A small RING buffer that the gap's presence alone would overflow keeps everything a
    declining edge is owed (0 lost); the same buffer of an edge taking presence loses some."""
    sid = "s-decline-buffer"
    # it reads none of the presence it is sent: room for all of it, so its close is prompt
    client = await Peer.open(master.ws_url, sid, token=API_KEY, create=True, max_queue=64)
    small = {"policy": "RING", "capacity_bytes": 1500}
    peers = {
        taken: await Peer.open(
            master.ws_url, sid, role="edge", token=API_KEY, buffer=small, presence=taken
        )
        for taken in (False, True)
    }
    ids = {taken: peer.participant_id for taken, peer in peers.items()}
    for peer in peers.values():
        await peer.close()
        await detached(master, sid, peer)
    await _come_and_go(master, sid, 5)  # ten presence frames, ~2.5 KB as delivered
    sent = await client.send("agent.state", {"state": "thinking"})
    lost = {}
    backs = []
    for taken in (True, False):  # the taker first: the other's return is not in its backlog
        back = await Peer.open(
            master.ws_url, sid, role="edge", token=API_KEY, participant_id=ids[taken]
        )
        history = (await back.recv())["payload"]
        lost[taken] = history["buffer_status"]["lost_frame_count"]
        assert history["frames"][-1]["message_id"] == sent["message_id"]
        if not taken:
            assert _types(history["frames"]) == ["agent.state"]
        backs.append(back)
    assert lost[False] == 0
    assert lost[True] > 0
    for peer in (*backs, client):
        await peer.close()


async def test_a_presence_that_is_not_a_boolean_is_a_malformed_hello(master: Master) -> None:
    """``presence: "no"`` (or 0) closes 4400, like any malformed hello; nothing attaches."""
    client = await Peer.open(master.ws_url, "s-decline-bad", token=API_KEY, create=True)
    for bad in ("no", 0):
        message = hello("s-decline-bad", role="edge", presence=bad)
        assert await hello_close_code(master, message) == 4400
    assert list(master.hub.sessions["s-decline-bad"].participants) == [client.participant_id]
    await client.close()


async def _declined_backlog(steps: list[str], policy: str, capacity: int) -> None:
    master = await start_master()
    sid = "s-decline-property"
    try:
        client = await Peer.open(master.ws_url, sid, token=API_KEY, create=True, max_queue=None)
        grant = {"policy": policy, "capacity_bytes": capacity}
        viewer = await Peer.open(
            master.ws_url, sid, role="edge", token=API_KEY, presence=False, buffer=grant
        )
        pid, cursor = viewer.participant_id, viewer.welcome["payload"]["session"]["head_seq"]
        await viewer.close()
        await detached(master, sid, viewer)
        sent = 0
        for step in steps:
            if step == "edge":
                await _come_and_go(master, sid, 1)
            else:
                await client.send("agent.state", {"state": "thinking"})
                sent += 1

        async def all_logged() -> bool:
            return sum(e.type == "agent.state" for e in await master.store.read(sid)) == sent

        await wait_until(all_logged, what="the client's frames logged")
        # What it is owed, from the log: every entry after its cursor meant for it, presence
        # aside; the policy's rule over their sizes as delivered (notes §15.4).
        log = [e for e in await master.store.read(sid) if e.seq > cursor]
        owed = [e for e in log if e.type != "session.presence" and e.delivered_to(pid, "edge")]
        expected = simulate(policy, [len(e.data) for e in owed], capacity)
        back = await Peer.open(master.ws_url, sid, role="edge", token=API_KEY, participant_id=pid)
        history = (await back.recv())["payload"]
        assert [f["seq"] for f in history["frames"]] == [owed[i].seq for i in expected.kept]
        assert history["buffer_status"]["lost_frame_count"] == expected.lost
        for peer in (back, client):
            await peer.close()
    finally:
        await master.stop()


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(st.sampled_from(["edge", "frame"]), min_size=1, max_size=10),
    policy=st.sampled_from(["RING", "DROP"]),
    capacity=st.integers(150, 2500),
)
def test_a_declined_backlog_is_the_policy_over_the_frames_it_is_owed(
    steps: list[str], policy: str, capacity: int
) -> None:
    """Whatever mix of presence and client frames a declining edge missed, its backlog is
    exactly what its RING or DROP buffer keeps of the non-presence frames (Hypothesis)."""
    asyncio.run(_declined_backlog(steps, policy, capacity))
