"""Presence under coalescing (issue 16, docs/protocol.md §5 item 11, notes §5, §15.4).

Many edges attach and detach at once on a real master over real sockets; every participant
folds the presence frames it is given (live and in its backlog, one change or coalesced
ones) and must end knowing exactly who is attached — the same as the master's own list.
"""

from __future__ import annotations

import asyncio
from typing import Any

import relay.session.roster
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.e2e.util import is_presence, logged, wait_until
from tests.support.wire import Peer

EDGES = 30


class Roster:
    """One participant's view of who is attached, folded from the frames it receives."""

    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        self.states: dict[str, str] = {}
        self.task = asyncio.get_running_loop().create_task(self._read())

    def _fold(self, frame: dict[str, Any]) -> None:
        if frame.get("type") == "session.history" and frame.get("seq") is None:
            for inner in frame["payload"]["frames"]:
                self._fold(inner)
        elif frame.get("type") == "session.presence":
            payload = frame["payload"]
            for change in payload.get("changes") or [payload]:
                self.states[change["participant_id"]] = change["state"]

    async def _read(self) -> None:
        while True:
            try:
                frame = await self.peer.recv(timeout=60)
            except Exception:
                return
            self._fold(frame)

    def attached(self) -> set[str]:
        """Who this participant believes is attached (itself included: it knows it is)."""
        seen = {pid for pid, state in self.states.items() if state == "attached"}
        return (seen - {self.peer.participant_id}) | {self.peer.participant_id}


async def _edge(master: Master, session_id: str) -> Peer:
    # resume from seq 0: the whole log, so a joiner learns who attached before it, too
    return await Peer.open(
        master.ws_url, session_id, role="edge", token=API_KEY, resume={"last_seq": 0}
    )


def _truth(master: Master, session_id: str) -> set[str]:
    return set(master.hub.sessions[session_id].participants)


async def _agree(master: Master, session_id: str, rosters: list[Roster]) -> None:
    """Wait (bounded) until every roster equals the master's list of attached participants."""
    await wait_until(
        lambda: all(r.attached() == _truth(master, session_id) for r in rosters), timeout=30
    )


async def test_burst_of_attaches_and_closes_every_edge_knows_who_is_attached(
    master: Master,
) -> None:
    """Thirty edges attach at once, then half close at once: every roster ends exact."""
    sid = "s-storm-burst"
    client = await Peer.open(master.ws_url, sid, token=API_KEY, create=True)
    edges = await asyncio.gather(*(_edge(master, sid) for _ in range(EDGES)))
    rosters = [Roster(p) for p in (client, *edges)]
    await _agree(master, sid, rosters)
    assert len(_truth(master, sid)) == EDGES + 1
    leaving, staying = edges[: EDGES // 2], edges[EDGES // 2 :]
    await asyncio.gather(*(p.close() for p in leaving))
    await wait_until(lambda: len(_truth(master, sid)) == 1 + len(staying), timeout=30)
    remaining = [r for r in rosters if r.peer not in leaving]
    await _agree(master, sid, remaining)
    for r in remaining:
        for p in leaving:
            assert r.states.get(p.participant_id) == "detached"
    for r in rosters:
        r.task.cancel()
    for p in (client, *staying):
        await p.close()


async def test_coalesced_detaches_are_one_frame_and_a_late_joiner_agrees(master: Master) -> None:
    """Fifteen detaches queued in one step are logged as one frame; a late joiner agrees."""
    sid = "s-storm-coalesced"
    client = await Peer.open(master.ws_url, sid, token=API_KEY, create=True)
    edges = await asyncio.gather(*(_edge(master, sid) for _ in range(EDGES)))
    rosters = [Roster(p) for p in (client, *edges)]
    await _agree(master, sid, rosters)
    session = master.hub.sessions[sid]
    leaving = edges[:15]
    participants = [session.participants[p.participant_id] for p in leaving]
    # Hold the session lock while the fifteen sockets close: their detaches all queue on it
    # (each closes its outbox first), so the presence step after them sees all fifteen.
    async with session.lock:
        await asyncio.gather(*(p.close() for p in leaving))
        await wait_until(lambda: all(q.outbox.closed for q in participants), timeout=30)
    await wait_until(lambda: len(_truth(master, sid)) == 1 + EDGES - 15, timeout=30)
    remaining = [r for r in rosters if r.peer not in leaving]
    await _agree(master, sid, remaining)
    log = await logged(master, sid)
    gone = {p.participant_id for p in leaving}
    coalesced = [
        f
        for f in log
        if f["type"] == "session.presence"
        and {c["participant_id"] for c in f["payload"].get("changes") or []} == gone
    ]
    assert len(coalesced) == 1, [
        (f["payload"]["state"], len(f["payload"].get("changes") or [1]))
        for f in log
        if f["type"] == "session.presence"
    ]
    frame = coalesced[0]["payload"]
    assert [c["state"] for c in frame["changes"]] == ["detached"] * 15
    first = frame["changes"][0]
    assert (frame["participant_id"], frame["role"], frame["state"]) == (
        first["participant_id"],
        first["role"],
        first["state"],
    )
    # A late joiner replays the log from seq 1 (coalesced frames included) and agrees.
    late = Roster(await _edge(master, sid))
    await _agree(master, sid, [late, *remaining])
    assert late.attached() == _truth(master, sid)
    for r in [late, *rosters]:
        r.task.cancel()
    for p in [late.peer, client, *edges[15:]]:
        await p.close()


async def test_small_sessions_keep_one_change_per_frame(master: Master) -> None:
    """Below the coalescing audience each change is its own frame, not sent to its subject."""
    sid = "s-storm-small"
    client = await Peer.open(master.ws_url, sid, token=API_KEY, create=True)
    edge = await Peer.open(master.ws_url, sid, role="edge", token=API_KEY)
    got = await client.recv_type("session.presence")
    assert got["payload"] == {
        "participant_id": edge.participant_id,
        "role": "edge",
        "state": "attached",
    }
    assert relay.session.roster._COALESCE_AUDIENCE > 2
    await edge.close()
    got = await client.recv_type("session.presence")
    assert "changes" not in got["payload"]
    assert got["payload"]["state"] == "detached"
    await client.close()


async def test_sessions_bursting_together_each_end_exact_and_the_pacing_settles(
    master: Master,
) -> None:
    """Four sessions of twelve edges attach at once (their presence steps paced together):
    every roster of every session ends exact, and no step is left counted as waiting."""
    sids = [f"s-storm-shared-{i}" for i in range(4)]
    clients = await asyncio.gather(
        *(Peer.open(master.ws_url, sid, token=API_KEY, create=True) for sid in sids)
    )
    edges = await asyncio.gather(*(_edge(master, sid) for sid in sids for _ in range(12)))
    by_session = {sid: [c] for sid, c in zip(sids, clients, strict=True)}
    for i, edge in enumerate(edges):
        by_session[sids[i // 12]].append(edge)
    rosters = {sid: [Roster(p) for p in peers] for sid, peers in by_session.items()}
    await asyncio.gather(*(_agree(master, sid, rosters[sid]) for sid in sids))
    for sid in sids:
        assert len(_truth(master, sid)) == 13
    await asyncio.gather(*(p.close() for p in edges[::2]))
    await wait_until(lambda: all(len(_truth(master, sid)) == 7 for sid in sids), timeout=30)
    staying = {sid: [r for r in rs if r.peer not in edges[::2]] for sid, rs in rosters.items()}
    await asyncio.gather(*(_agree(master, sid, staying[sid]) for sid in sids))
    await wait_until(lambda: master.hub.session_deps.presence.waiting == 0, timeout=10)
    for rs in rosters.values():
        for r in rs:
            r.task.cancel()
    for p in (*clients, *edges[1::2]):
        await p.close()


async def test_edges_declining_presence_get_none_of_a_burst_and_the_rest_stay_exact(
    master: Master,
) -> None:
    """Thirty edges attach at once, every other one declining presence, then half close:
    the takers' rosters end exact (coalesced frames included), the decliners get no
    presence frame at all, live or in their backlogs (docs/protocol.md §5 item 12)."""
    sid = "s-storm-declining"
    client = await Peer.open(master.ws_url, sid, token=API_KEY, create=True)
    edges = await asyncio.gather(
        *(
            Peer.open(
                master.ws_url,
                sid,
                role="edge",
                token=API_KEY,
                resume={"last_seq": 0},
                presence=False if i % 2 else None,
            )
            for i in range(EDGES)
        )
    )
    declining = edges[1::2]
    rosters = [Roster(p) for p in (client, *edges[::2])]
    silent = [Roster(p) for p in declining]
    await _agree(master, sid, rosters)
    await asyncio.gather(*(p.close() for p in edges[:10]))
    await wait_until(lambda: len(_truth(master, sid)) == 1 + EDGES - 10, timeout=30)
    staying = [r for r in rosters if r.peer not in edges[:10]]
    await _agree(master, sid, staying)
    log = await logged(master, sid)
    assert any(len(f["payload"].get("changes") or []) > 1 for f in log if is_presence(f))
    sentinel = await client.send("agent.state", {"state": "thinking"})
    for r in silent:
        if r.peer in edges[:10]:
            continue
        await wait_until(lambda r=r: bool(r.peer.received), timeout=10)
        await wait_until(lambda r=r: r.peer.received[-1]["message_id"] == sentinel["message_id"])
        assert not r.states, r.peer.received
        kinds = [f["type"] for f in r.peer.received]
        assert kinds == ["connection.welcome", "session.history", "agent.state"]
    for r in [*rosters, *silent]:
        r.task.cancel()
    for p in (client, *edges[10:]):
        await p.close()
