"""A store failure of any kind is answered to the sender and never stops the session's worker."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from protocol.errors import (
    CloseCode,
    FormatVersionError,
    SessionMissing,
    StoreError,
    StoreUnavailableError,
)
from relay.server import Master
from relay.store.base import AppendResult, Deadline, NewEntry, SessionHeader
from tests.e2e.conftest import API_KEY
from tests.e2e.conftest import test_settings as settings_for
from tests.e2e.util import http
from tests.support.presence import roster_of
from tests.support.wire import Peer, envelope, new_turn_id

__all__: list[str] = []


@pytest.fixture
async def master() -> AsyncIterator[Master]:
    """A master on the memory store (the session worker is the same for every store)."""
    started = Master(settings_for())
    await started.start()
    yield started
    await started.stop()


async def client_and_edge(master: Master, sid: str) -> tuple[Peer, Peer]:
    """A new session's client and one edge, the edge's presence already read by the client."""
    client = await Peer.open(master.ws_url, sid, token=API_KEY, create=True)
    edge = await Peer.open(master.ws_url, sid, role="edge", token=API_KEY)
    await client.recv()  # the edge's presence
    return client, edge


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (StoreUnavailableError("redis unreachable"), "store_unavailable"),
        (StoreError("redis error: WRONGTYPE"), "store_unavailable"),
        (FormatVersionError("written by a newer build; upgrade"), "version_unsupported"),
        (SessionMissing("s-faults"), "not_allowed"),
    ],
)
async def test_a_refused_append_is_answered_and_the_session_goes_on(
    master: Master, monkeypatch: pytest.MonkeyPatch, failure: BaseException, code: str
) -> None:
    """The sender gets a non-fatal session.error naming the frame; the session goes on (after
    ``store_unavailable`` from the refused frame again: later ones are refused until then)."""
    sid = "s-faults"
    client, edge = await client_and_edge(master, sid)
    real = master.store.append
    failures = [failure]

    async def flaky(session_id: str, entries: Sequence[NewEntry]) -> list[AppendResult]:
        if failures and entries[0].sender_role == "client":
            raise failures.pop()
        return await real(session_id, entries)

    monkeypatch.setattr(master.store, "append", flaky)
    refused = await client.send("agent.state", {"state": "thinking"})
    error: dict[str, Any] = await client.recv()
    assert error["type"] == "session.error"
    assert error["payload"]["error_code"] == code
    assert error["payload"]["fatal"] is False
    assert refused["message_id"] in error["payload"]["message"]
    assert refused["message_id"] not in [e.message_id for e in await master.store.read(sid)]
    accepted = await client.send("agent.state", {"state": "responding"})
    if code == "store_unavailable":
        # in order: not logged before the refused frame is (docs/protocol.md §7)
        barred = await client.recv()
        assert barred["payload"]["error_code"] == "store_unavailable"
        assert accepted["message_id"] in barred["payload"]["message"]
        assert f"frame {refused['message_id']} before it" in barred["payload"]["message"]
        await client.send_frame(refused)
        assert (await edge.recv())["message_id"] == refused["message_id"]
        await client.send_frame(accepted)
    got = await edge.recv()
    assert got["message_id"] == accepted["message_id"]


_BACKEND_TEXT = "redis unreachable: Error 111 connecting to 10.9.8.7:6380. Connection refused."


@pytest.mark.parametrize("failure", [StoreUnavailableError, StoreError])
async def test_a_refusal_names_the_failure_kind_never_the_store_s_own_text(
    master: Master, monkeypatch: pytest.MonkeyPatch, failure: type[StoreError]
) -> None:
    """The session.error of a refused frame says the store failed, not where it lives: the
    backend's text (hosts, ports, paths) stays in the master's log."""
    client, _ = await client_and_edge(master, "s-faults-text")
    real = master.store.append

    async def failing(session_id: str, entries: Sequence[NewEntry]) -> list[AppendResult]:
        if entries[0].sender_role == "client":
            raise failure(_BACKEND_TEXT)
        return await real(session_id, entries)

    monkeypatch.setattr(master.store, "append", failing)
    await client.send("agent.state", {"state": "thinking"})
    error: dict[str, Any] = await client.recv()
    assert error["payload"]["error_code"] == "store_unavailable"
    assert "10.9.8.7" not in error["payload"]["message"]
    assert "6380" not in error["payload"]["message"]
    assert "the store" in error["payload"]["message"]


async def test_a_batch_folded_behind_a_refused_one_is_refused_too(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch folded while the one before was being appended is refused with it, unlogged."""
    sid = "s-pipeline"
    client, edge = await client_and_edge(master, sid)
    real = master.store.append
    gate = asyncio.Event()
    held: list[Sequence[NewEntry]] = []

    async def slow_then_refused(session_id: str, entries: Sequence[NewEntry]) -> list[AppendResult]:
        if entries[0].sender_role == "client" and not held:
            held.append(entries)
            await gate.wait()
            raise StoreUnavailableError("redis unreachable")
        return await real(session_id, entries)

    monkeypatch.setattr(master.store, "append", slow_then_refused)
    turn = new_turn_id()
    start = await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    async with asyncio.timeout(5):
        while not held:
            await asyncio.sleep(0.005)
    # valid only with the turn open, whose start is still on its way to the log
    end = {"turn_id": turn, "stop_reason": "end_turn"}
    delta = await client.send("session.turn.end", end)
    session = master.hub.sessions[sid]
    async with asyncio.timeout(5):
        while session.pipeline.in_flight < 2:  # folded on top of the turn start, append chained
            await asyncio.sleep(0.005)
    gate.set()
    errors = [await client.recv(), await client.recv()]
    assert [e["payload"]["error_code"] for e in errors] == ["store_unavailable"] * 2
    assert start["message_id"] in errors[0]["payload"]["message"]
    assert delta["message_id"] in errors[1]["payload"]["message"]
    logged = [e.message_id for e in await master.store.read(sid)]
    assert start["message_id"] not in logged
    assert delta["message_id"] not in logged
    # in order: a new frame is refused until the first refused one arrives again
    await client.send("agent.state", {"state": "idle"})
    barred = await client.recv()
    assert barred["payload"]["error_code"] == "store_unavailable"
    assert f"frame {start['message_id']} before it" in barred["payload"]["message"]
    # the state was rebuilt from the log: no turn is open, so the re-sent start is accepted
    await client.send_frame(start)
    got = await edge.recv()
    assert got["message_id"] == start["message_id"]


async def test_a_history_whose_lookup_fails_is_refused_and_later_frames_wait_for_it(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A history the store cannot check is refused naming it; frames after it wait for it."""
    sid = "s-history-lookup"
    client, edge = await client_and_edge(master, sid)
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    assert (await edge.recv())["type"] == "session.turn.start"
    real = master.store.message_seq
    failures: list[BaseException] = [StoreUnavailableError("redis unreachable")]

    async def flaky(session_id: str, message_id: str) -> int | None:
        if failures:
            raise failures.pop()
        return await real(session_id, message_id)

    monkeypatch.setattr(master.store, "message_seq", flaky)
    inner = envelope(sid, "agent.text.delta", {"block_id": "b1", "delta": "offline"})
    payload = {
        "frames": [inner],
        "buffer_status": {"policy_applied": "RING", "truncated": False},
        "last_sync_timestamp": "2026-11-29T09:00:00.000Z",
        "last_message_id": inner["message_id"],
    }
    refused = await client.send("session.history", payload)
    error = await client.recv()
    assert error["type"] == "session.error"
    assert error["payload"]["error_code"] == "store_unavailable"
    assert refused["message_id"] in error["payload"]["message"]
    # not judged against a state without the history: refused until the history comes again
    later = await client.send("agent.text.done", {"block_id": "b1"})
    barred = await client.recv()
    assert barred["payload"]["error_code"] == "store_unavailable"
    assert later["message_id"] in barred["payload"]["message"]
    assert f"frame {refused['message_id']} before it" in barred["payload"]["message"]
    logged = [e.message_id for e in await master.store.read(sid)]
    assert refused["message_id"] not in logged
    assert later["message_id"] not in logged
    again = await client.send("session.history", payload)
    got = await edge.recv()
    assert got["message_id"] == again["message_id"]
    assert [f["message_id"] for f in got["payload"]["frames"]] == [inner["message_id"]]
    await client.send_frame(later)
    assert (await edge.recv())["message_id"] == later["message_id"]


async def queued_together(
    master: Master, sid: str, client: Peer, frames: Sequence[tuple[str, dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Send ``frames`` while the session's lock is held, so its worker takes them as one batch."""
    session = master.hub.sessions[sid]
    sent = []
    async with session.lock:
        for type_, payload in frames:
            sent.append(await client.send(type_, payload))
        async with asyncio.timeout(5):
            while session.queued < len(frames):
                await asyncio.sleep(0.005)
    return sent


def rename_payload(sid: str, name: str) -> dict[str, Any]:
    """A client's session.renamed payload."""
    return {"session_id": sid, "name": name, "renamed_by": "client"}


async def test_a_rename_the_header_cannot_take_delays_no_frame_and_is_written_later(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A header write refused while a batch settles holds back no frame committed with the
    rename, and the name is written again with the next entry committed."""
    sid = "s-rename-fault"
    client, edge = await client_and_edge(master, sid)
    real = master.store.rename_session
    failures: list[BaseException] = [StoreUnavailableError("redis unreachable")]

    async def flaky(session_id: str, name: str) -> None:
        if failures:
            raise failures.pop()
        await real(session_id, name)

    monkeypatch.setattr(master.store, "rename_session", flaky)
    renamed, after = await queued_together(
        master,
        sid,
        client,
        [("session.renamed", rename_payload(sid, "offline")), ("agent.state", {"state": "idle"})],
    )
    assert (await edge.recv())["message_id"] == renamed["message_id"]
    assert (await edge.recv())["message_id"] == after["message_id"]
    assert not failures  # the first write was refused ...
    header = await master.store.get_session(sid)
    assert header is not None
    assert header.name == "offline"  # ... and written again with the next entry committed
    assert master.hub.sessions[sid].header.name == "offline"


async def test_a_rename_inside_a_history_the_header_cannot_take_loses_no_later_frame(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A history's rename whose header write fails: the frames after the history in the same
    batch are still judged, logged and delivered."""
    sid = "s-history-rename-fault"
    client, edge = await client_and_edge(master, sid)

    async def refused(session_id: str, name: str) -> None:
        raise StoreUnavailableError("redis unreachable")

    monkeypatch.setattr(master.store, "rename_session", refused)
    inner = envelope(sid, "session.renamed", rename_payload(sid, "buffered"))
    history = {
        "frames": [inner],
        "buffer_status": {"policy_applied": "RING", "truncated": False},
        "last_sync_timestamp": "2026-11-29T09:00:00.000Z",
        "last_message_id": inner["message_id"],
    }
    sent, after = await queued_together(
        master, sid, client, [("session.history", history), ("agent.state", {"state": "idle"})]
    )
    got = await edge.recv()
    assert got["message_id"] == sent["message_id"]
    assert [f["message_id"] for f in got["payload"]["frames"]] == [inner["message_id"]]
    assert (await edge.recv())["message_id"] == after["message_id"]
    logged = [e.message_id for e in await master.store.read(sid)]
    assert after["message_id"] in logged
    assert master.hub.sessions[sid].header.name == "buffered"


async def test_a_fatal_error_logged_though_its_reply_was_lost_ends_the_session(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store applied the fatal error's append but its reply was lost: the sender is told
    store_unavailable, the refold finds the entry as this node's own, and the session ends."""
    sid = "s-lost-reply-fatal"
    client, edge = await client_and_edge(master, sid)
    real = master.store.append
    lost: list[str] = []

    async def reply_lost(session_id: str, entries: Sequence[NewEntry]) -> list[AppendResult]:
        results = await real(session_id, entries)
        if not lost and entries[0].type == "session.error":
            lost.append(entries[0].message_id)
            raise StoreUnavailableError("redis connection lost before the reply")
        return results

    monkeypatch.setattr(master.store, "append", reply_lost)
    session = master.hub.sessions[sid]
    fatal = await client.send(
        "session.error", {"error_code": "agent_crashed", "message": "boom", "fatal": True}
    )
    frames = await edge.recv_until(lambda f: f["type"] == "session.deleted", timeout=10.0)
    assert frames[-1]["payload"]["reason"] == "error"
    assert lost == [fatal["message_id"]]
    await asyncio.wait_for(session.ended.wait(), 10)
    header = await master.store.get_session(sid)
    assert header is None or header.archived  # ended: archived (notes §16.1), or gone
    assert sid not in master.hub.sessions


@contextlib.asynccontextmanager
async def _started(**changes: Any) -> AsyncIterator[Master]:
    """A master with these settings, stopped on the way out."""
    started = Master(settings_for(**changes))
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


def _refuse_once(monkeypatch: pytest.MonkeyPatch, store: Any, method: str) -> None:
    """Make the store's next call of ``method`` fail as an outage; later calls go through."""
    real = getattr(store, method)

    async def refuse(*args: Any, **kwargs: Any) -> None:
        monkeypatch.setattr(store, method, real)
        raise StoreUnavailableError("the store is down for this test")

    monkeypatch.setattr(store, method, refuse)


def _refuse_the_next_expiry(monkeypatch: pytest.MonkeyPatch, store: Any) -> list[str]:
    """Make the store refuse the next append that logs an ``expired`` presence; returns the
    refused frames' ids."""
    real = store.append
    refused: list[str] = []

    async def refuse_the_expiry(session_id: str, entries: Sequence[NewEntry]) -> Any:
        if not refused and any(b'"expired"' in e.head + e.tail for e in entries):
            refused.append(entries[0].message_id)
            raise StoreUnavailableError("the store is down for this test")
        return await real(session_id, entries)

    monkeypatch.setattr(store, "append", refuse_the_expiry)
    return refused


def _last_seq(peer: Peer) -> int:
    return max((f["seq"] for f in peer.received if "seq" in f), default=0)


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_a_detach_the_store_cannot_record_reloads_the_session_and_recovers_the_edge(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's other connections close 1013 and reattach to one session loaded afresh,
    which logs the lost edge detached (then expired); one fan-out again, the log gapless."""
    url = "memory" if store == "memory" else f"sqlite:{tmp_path / 'rawp.db'}"
    async with _started(reattach_window_s=0.5, store=url) as master:
        sid = "s-lost-detach"
        client, edge = await client_and_edge(master, sid)
        watcher = await Peer.open(master.ws_url, sid, role="edge", token=API_KEY)
        await client.recv_type("session.presence")  # the watcher's
        kept = master.store
        _refuse_once(monkeypatch, kept, "put_detached")
        await edge.close()
        assert await client.closed_with() == CloseCode.TRY_AGAIN_LATER
        assert await watcher.closed_with() == CloseCode.TRY_AGAIN_LATER
        assert sid not in master.hub.sessions  # nothing answers from the old object

        watcher = await Peer.open(
            master.ws_url, sid, role="edge", token=API_KEY,
            participant_id=watcher.participant_id, resume={"last_seq": _last_seq(watcher)},
        )  # fmt: skip
        client = await Peer.open(
            master.ws_url, sid, token=API_KEY,
            participant_id=client.participant_id, resume={"last_seq": _last_seq(client)},
        )  # fmt: skip
        assert client.welcome["payload"]["resumed"] is True
        turn = new_turn_id()
        start = await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
        got = await watcher.recv_until(lambda f: f.get("type") == "session.turn.start")
        assert got[-1]["message_id"] == start["message_id"]

        entries = await kept.read(sid)
        assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
        async with asyncio.timeout(5):
            while roster_of(await kept.read(sid)).get(edge.participant_id) != "expired":
                await asyncio.sleep(0.05)
        assert roster_of(await kept.read(sid)) == {
            client.participant_id: "attached",
            watcher.participant_id: "attached",
            edge.participant_id: "expired",
        }
        await client.close()
        await watcher.close()


async def test_a_takeover_the_store_cannot_record_leaves_no_participant_attached_forever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The superseded generation's record is recovered on the reload: detached, then
    expired, and the participant comes back through the next attach as any other."""
    async with _started(reattach_window_s=0.5) as master:
        sid = "s-lost-takeover"
        client, edge = await client_and_edge(master, sid)
        store = master.store
        _refuse_once(monkeypatch, store, "put_attached")
        again = await Peer.open(
            master.ws_url, sid, role="edge", token=API_KEY,
            participant_id=edge.participant_id, expect_welcome=False,
        )  # fmt: skip
        assert await again.closed_with() == CloseCode.TRY_AGAIN_LATER
        assert await edge.closed_with() == CloseCode.SUPERSEDED
        assert await client.closed_with() == CloseCode.TRY_AGAIN_LATER
        client = await Peer.open(
            master.ws_url, sid, token=API_KEY, participant_id=client.participant_id
        )
        async with asyncio.timeout(5):
            while roster_of(await store.read(sid)).get(edge.participant_id) != "expired":
                await asyncio.sleep(0.05)
        record = await store.get_participant(sid, edge.participant_id)
        assert record is None  # expired: its record is gone
        await client.close()


async def test_an_expiry_the_log_cannot_take_is_logged_when_the_session_is_loaded_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The edge's record is gone but its ``expired`` presence was refused: the session is
    reloaded (its client closed 1013), and the load logs what the records say, so the log's
    roster is the records' again."""
    async with _started(reattach_window_s=0.3) as master:
        sid = "s-lost-expiry"
        client, edge = await client_and_edge(master, sid)
        store = master.store
        refused = _refuse_the_next_expiry(monkeypatch, store)
        await edge.close()
        assert await client.closed_with() == CloseCode.TRY_AGAIN_LATER
        assert refused
        assert await store.get_participant(sid, edge.participant_id) is None
        assert roster_of(await store.read(sid))[edge.participant_id] == "detached"

        client = await Peer.open(
            master.ws_url, sid, token=API_KEY, participant_id=client.participant_id
        )
        assert roster_of(await store.read(sid)) == {
            client.participant_id: "attached",
            edge.participant_id: "expired",
        }
        await client.close()


async def test_a_new_client_whose_predecessor_cannot_be_expired_is_closed_and_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The old client's ``expired`` is refused, which unloads the session: the new client is
    closed 1013, never left on the unloaded object; its retry attaches to the reloaded one."""
    async with _started(reattach_window_s=30.0) as master:
        sid = "s-lost-predecessor"
        old, edge = await client_and_edge(master, sid)
        await old.close()
        await edge.recv_type("session.presence")  # the old client detached
        store = master.store
        refused = _refuse_the_next_expiry(monkeypatch, store)
        new = await Peer.open(master.ws_url, sid, token=API_KEY, expect_welcome=False)
        assert await new.closed_with() == CloseCode.TRY_AGAIN_LATER
        assert await edge.closed_with() == CloseCode.TRY_AGAIN_LATER
        assert refused
        new = await Peer.open(master.ws_url, sid, token=API_KEY)
        session = master.hub.sessions[sid]
        assert session.client_id == new.participant_id
        assert list(session.participants) == [new.participant_id]
        roster = roster_of(await store.read(sid))
        assert roster[old.participant_id] == "expired"
        assert roster[new.participant_id] == "attached"
        await new.close()


async def test_a_detached_participant_whose_deadline_was_lost_expires_after_a_reload() -> None:
    """Loading again arms every detached record's deadline, due when it first was."""
    async with _started(reattach_window_s=0.5) as master:
        sid = "s-lost-deadline"
        client, edge = await client_and_edge(master, sid)
        await edge.close()
        await client.recv_type("session.presence")  # detached
        await master.store.clear_deadline(sid, edge.participant_id)  # a write that was lost
        master.hub.unload_stale(master.hub.sessions[sid])
        assert await client.closed_with() == CloseCode.TRY_AGAIN_LATER
        client = await Peer.open(
            master.ws_url, sid, token=API_KEY, participant_id=client.participant_id
        )
        async with asyncio.timeout(5):
            while roster_of(await master.store.read(sid)).get(edge.participant_id) != "expired":
                await asyncio.sleep(0.05)
        assert await master.store.get_participant(sid, edge.participant_id) is None
        await client.close()


async def test_a_load_whose_recovery_the_store_refuses_stays_readable_and_recovers_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full disk refuses the recovery's writes: the session is still read (HTTP 200), an
    attach meanwhile closes 1013, and the next attach recovers it first, then attaches."""
    async with _started(reattach_window_s=30.0) as master:
        sid = "s-unrecovered"
        client, edge = await client_and_edge(master, sid)
        master.hub.unload_stale(master.hub.sessions[sid])
        assert await client.closed_with() == CloseCode.TRY_AGAIN_LATER
        assert await edge.closed_with() == CloseCode.TRY_AGAIN_LATER
        _refuse_once(monkeypatch, master.store, "put_participant")  # the recovery's first write
        status, body = await http(master, "GET", f"/v1/sessions/{sid}")
        assert status == 200, body
        assert master.hub.sessions[sid].needs_recovery
        _refuse_once(monkeypatch, master.store, "put_participant")  # still full
        early = await Peer.open(
            master.ws_url, sid, token=API_KEY,
            participant_id=client.participant_id, expect_welcome=False,
        )  # fmt: skip
        assert await early.closed_with() == CloseCode.TRY_AGAIN_LATER
        client = await Peer.open(
            master.ws_url, sid, token=API_KEY, participant_id=client.participant_id
        )
        assert client.welcome["payload"]["resumed"] is True
        assert not master.hub.sessions[sid].needs_recovery
        assert roster_of(await master.store.read(sid)) == {
            client.participant_id: "attached",
            edge.participant_id: "detached",
        }
        await client.close()


async def test_a_read_whose_load_the_store_fails_answers_503_store_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store's outage under a GET is the store's fault, retryable: 503 problem+json with
    ``store_unavailable``, never a 400; the same GET once the store answers is 200."""
    async with _started() as master:
        sid = "s-read-outage"
        await client_and_edge(master, sid)
        master.hub.unload_stale(master.hub.sessions[sid])
        _refuse_once(monkeypatch, master.store, "read")  # the load's read of the log
        status, body = await http(master, "GET", f"/v1/sessions/{sid}")
        assert (status, body["code"]) == (503, "store_unavailable"), body
        status, body = await http(master, "GET", f"/v1/sessions/{sid}")
        assert status == 200, body


async def test_a_deadline_of_a_session_a_newer_build_wrote_is_put_back_not_dropped(
    master: Master,
) -> None:
    """During a rolling upgrade a node may claim the deadline of a session it cannot read:
    it leaves it for a node that can (never dropped, so that participant still expires)."""
    newer = SessionHeader(
        session_id="s-newer-format",
        workspace="default",
        created_at="2026-12-03T00:00:00Z",
        epoch="e",
        format_version=master.store.format_version + 1,
    )
    await master.store.create_session(newer)
    due_ms = int(time.time() * 1000) + 60_000  # not claimed by the hub's own ticks meanwhile
    deadline = Deadline(session_id=newer.session_id, participant_id="p-1", due_ms=due_ms)
    await master.hub._expire(deadline)
    assert await master.store.claim_due_deadlines(due_ms + 1) == [deadline]
