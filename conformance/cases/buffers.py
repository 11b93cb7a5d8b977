"""Reattach buffers, backlogs and dedupe (rawp-notes §7, §15.3–§15.5; RAWP §7.1.1 fields).

A participant that attaches with a ``resume`` cursor gets, right after the welcome, a
``session.history`` holding every frame after the cursor that live delivery would have sent it,
bounded by its buffer policy over the bytes of the envelopes as delivered:

* RING keeps the longest run of the newest frames that fits, DROP the longest run of the
  oldest, NONE nothing; ``lost_frame_count`` is exact; ``truncated`` says whether any was lost;
  ``buffer_high_watermark`` is the most bytes the buffer held at any moment;
* ``last_message_id`` / ``last_sync_timestamp`` name the cursor frame.

The runner learns each frame's delivered size from an edge that saw it live, then predicts the
backlog with its own model of the policies (:func:`simulate`) — exact counts, not estimates.
"""

from __future__ import annotations

import datetime as dt
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..case import case, expect, fail
from ..peer import Peer, Received
from ..runner import Context
from ..wire import new_id, now_iso

__all__ = ["Simulated", "simulate"]

# Text deltas of these lengths make frames of clearly different sizes, so RING and DROP keep
# different frames and the high watermark differs from the capacity.
_DELTAS = (40, 400, 10, 250, 30, 120)


@dataclass(frozen=True)
class Simulated:
    """What a policy keeps of a backlog: indexes kept, frames lost, peak bytes held."""

    kept: list[int]
    lost: int
    peak: int


def simulate(policy: str, sizes: list[int], capacity: int) -> Simulated:
    """The notes §15.4 policies, pushing frames oldest first."""
    if policy == "NONE":
        return Simulated([], len(sizes), 0)
    held: deque[int] = deque()
    size = lost = peak = 0
    closed = False
    for index, frame_size in enumerate(sizes):
        if policy == "DROP":
            if closed or size + frame_size > capacity:
                closed = True
                lost += 1
                continue
        elif frame_size > capacity:
            lost += len(held) + 1
            held.clear()
            size = 0
            continue
        else:
            while size + frame_size > capacity:
                size -= sizes[held.popleft()]
                lost += 1
        held.append(index)
        size += frame_size
        peak = max(peak, size)
    return Simulated(list(held), lost, peak)


@dataclass
class _Backlog:
    client: Peer
    observer: Peer
    cursor: dict[str, Any]
    frames: list[Received]

    @property
    def sizes(self) -> list[int]:
        return [r.size for r in self.frames]


async def _missed_frames(ctx: Context) -> _Backlog:
    """A client sends a turn start and six deltas; an edge records them as delivered."""
    client = await ctx.client()
    observer = await ctx.edge()
    start = await client.send("session.turn.start", {"turn_id": new_id(), "turn_index": 0})
    sent = [
        await client.send("agent.text.delta", {"block_id": "b1", "delta": "x" * n}) for n in _DELTAS
    ]
    got = await observer.recv_raw_until(
        lambda f: f.get("message_id") == sent[0]["message_id"], what="the client's first delta"
    )
    starts = [r for r in got if r.frame.get("message_id") == start["message_id"]]
    expect(bool(starts), "the turn start did not arrive before the first delta")
    # The cursor is the last frame before the deltas: the turn start, or the master's
    # session.status (running) logged right after it (notes §17.4).
    cursor = got[-2].frame if len(got) > 1 else starts[0].frame
    frames = [got[-1]]
    frames += [
        await observer.recv_id(f["message_id"], what="the client's deltas") for f in sent[1:]
    ]
    seq = cursor.get("seq")
    expect(isinstance(seq, int), f"the turn start has no integer seq: {seq!r}")
    seqs = [r.frame.get("seq") for r in frames]
    assert isinstance(seq, int)
    expect(
        seqs == list(range(seq + 1, seq + 1 + len(frames))),
        f"the deltas do not follow the turn start densely: cursor {seq}, seqs {seqs}",
    )
    return _Backlog(client, observer, cursor, frames)


async def _reattach(ctx: Context, backlog: _Backlog, policy: str, capacity: int) -> dict[str, Any]:
    """A new edge resumes from the cursor with the buffer; returns its session.history payload."""
    late = await ctx.edge(
        resume={"last_seq": backlog.cursor["seq"], "last_message_id": backlog.cursor["message_id"]},
        buffer={"policy": policy, "capacity_bytes": capacity},
    )
    granted = late.welcome["payload"].get("buffer", {})
    expect(
        granted.get("policy") == policy and granted.get("capacity_bytes") == capacity,
        f"asked for {policy}/{capacity}, welcome granted {granted!r}",
    )
    frame = await late.recv(what="session.history right after the welcome")
    expect(
        frame.get("type") == "session.history",
        f"the frame after the welcome is {frame.get('type')!r}, not session.history",
    )
    payload = frame.get("payload")
    expect(isinstance(payload, dict), "session.history has no payload")
    assert isinstance(payload, dict)
    expect(isinstance(payload.get("frames"), list), "session.history.frames is not a list")
    status = payload.get("buffer_status")
    expect(isinstance(status, dict), "session.history.buffer_status is missing")
    assert isinstance(status, dict)
    expect(
        status.get("policy_applied") == policy,
        f"policy_applied {status.get('policy_applied')!r}, expected {policy}",
    )
    expect(isinstance(status.get("truncated"), bool), "buffer_status.truncated is not a boolean")
    expect(
        payload.get("last_message_id") == backlog.cursor["message_id"],
        f"last_message_id {payload.get('last_message_id')!r} is not the cursor frame's id",
    )
    _same_time(payload.get("last_sync_timestamp"), backlog.cursor.get("timestamp"))
    return payload


def _same_time(got: Any, want: Any) -> None:
    try:
        ok = isinstance(got, str) and _parse(got) == _parse(str(want))
    except ValueError:
        ok = False
    expect(ok, f"last_sync_timestamp {got!r} is not the cursor frame's timestamp {want!r}")


def _parse(text: str) -> dt.datetime:
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def _check_frames(payload: dict[str, Any], backlog: _Backlog, expected: Simulated) -> None:
    frames = payload["frames"]
    want = [backlog.frames[i].frame for i in expected.kept]
    got_ids = [f.get("message_id") if isinstance(f, dict) else f for f in frames]
    want_ids = [f["message_id"] for f in want]
    names = {
        f["message_id"]: f"delta#{i + 1}" for i, f in enumerate(r.frame for r in backlog.frames)
    }
    expect(
        got_ids == want_ids,
        f"history holds {[names.get(str(m), m) for m in got_ids]}, expected "
        f"{[names[m] for m in want_ids]} (sizes {backlog.sizes})",
    )
    for got, wanted in zip(frames, want, strict=True):
        expect(got == wanted, f"history frame {got.get('seq')} differs from the live delivery")


def _check_status(payload: dict[str, Any], expected: Simulated, *, what: str) -> None:
    status = payload["buffer_status"]
    expect(
        status.get("truncated") is (expected.lost > 0),
        f"{what}: truncated is {status.get('truncated')!r} with {expected.lost} frames lost",
    )
    expect(
        status.get("lost_frame_count") == expected.lost,
        f"{what}: lost_frame_count {status.get('lost_frame_count')!r}, expected {expected.lost}",
    )


@case(
    id="notes-7/resume-backlog",
    level="MUST",
    description="resume from a cursor: session.history right after the welcome, every missed frame",
    kill="leave the newest missed frame out of the backlog without counting it lost",
)
async def resume_backlog(ctx: Context) -> None:
    backlog = await _missed_frames(ctx)
    capacity = 4 * sum(backlog.sizes) + 4096
    payload = await _reattach(ctx, backlog, "RING", capacity)
    expected = simulate("RING", backlog.sizes, capacity)
    _check_frames(payload, backlog, expected)
    _check_status(payload, expected, what="RING, ample capacity")


@case(
    id="notes-7/ring-exact",
    level="MUST",
    description="RING keeps the newest frames that fit; lost_frame_count is exact",
    kill="make RING keep the oldest frames (behave like DROP)",
)
async def ring_exact(ctx: Context) -> None:
    backlog = await _missed_frames(ctx)
    capacity = sum(backlog.sizes[-3:]) + 1
    payload = await _reattach(ctx, backlog, "RING", capacity)
    expected = simulate("RING", backlog.sizes, capacity)
    _check_frames(payload, backlog, expected)
    _check_status(payload, expected, what=f"RING {capacity} bytes")


@case(
    id="notes-7/drop-exact",
    level="MUST",
    description="DROP keeps the oldest frames that fit; lost_frame_count is exact",
    kill="make DROP keep the newest frames (behave like RING)",
)
async def drop_exact(ctx: Context) -> None:
    backlog = await _missed_frames(ctx)
    capacity = sum(backlog.sizes[:3]) + 1
    payload = await _reattach(ctx, backlog, "DROP", capacity)
    expected = simulate("DROP", backlog.sizes, capacity)
    _check_frames(payload, backlog, expected)
    _check_status(payload, expected, what=f"DROP {capacity} bytes")


@case(
    id="notes-7/none-exact",
    level="MUST",
    description="NONE sends no frames, truncated true, every missed frame counted lost",
    kill="make NONE keep frames like RING",
)
async def none_exact(ctx: Context) -> None:
    backlog = await _missed_frames(ctx)
    payload = await _reattach(ctx, backlog, "NONE", 65536)
    expected = simulate("NONE", backlog.sizes, 65536)
    _check_frames(payload, backlog, expected)
    _check_status(payload, expected, what="NONE")


@case(
    id="notes-15.4/high-watermark",
    level="SHOULD",
    description="buffer_high_watermark is the most bytes the bounded buffer held at any moment",
    kill="report the buffer's capacity as its high watermark",
)
async def high_watermark(ctx: Context) -> None:
    backlog = await _missed_frames(ctx)
    capacity = sum(backlog.sizes[-3:]) + 1
    expected = simulate("RING", backlog.sizes, capacity)
    while expected.peak == capacity:
        capacity += 1
        expected = simulate("RING", backlog.sizes, capacity)
    payload = await _reattach(ctx, backlog, "RING", capacity)
    got = payload["buffer_status"].get("buffer_high_watermark")
    expect(
        got == expected.peak,
        f"buffer_high_watermark {got!r}, expected {expected.peak} (capacity {capacity}, "
        f"sizes {backlog.sizes})",
    )


@case(
    id="notes-15.5/buffer-grant",
    level="MUST",
    description="the welcome grants the buffer policy the hello asked for, capacity at most asked",
    kill="ignore the hello's buffer request and grant the default RING buffer",
)
async def buffer_grant(ctx: Context) -> None:
    await ctx.client()
    edge = await ctx.edge(buffer={"policy": "DROP", "capacity_bytes": 2048})
    granted = edge.welcome["payload"].get("buffer", {})
    expect(granted.get("policy") == "DROP", f"asked DROP, granted {granted!r}")
    capacity = granted.get("capacity_bytes")
    expect(
        isinstance(capacity, int) and 0 <= capacity <= 2048,
        f"asked 2048 bytes, granted {capacity!r}",
    )


@case(
    id="notes-15.5/previous-policy-kept",
    level="MUST",
    description="a reattach without a buffer keeps the policy of the participant's previous hello",
    kill="forget the participant's previous buffer policy on reattach",
)
async def previous_policy(ctx: Context) -> None:
    await ctx.client()
    first = await ctx.edge(buffer={"policy": "DROP", "capacity_bytes": 3000})
    await first.close()
    again = await ctx.edge(participant_id=first.participant_id)
    expect(again.welcome["payload"].get("resumed") is True, "the edge's reattach was not resumed")
    granted = again.welcome["payload"].get("buffer", {})
    expect(granted.get("policy") == "DROP", f"previous hello asked DROP, granted {granted!r}")


@case(
    id="notes-7/dedupe-live",
    level="MUST",
    description="a frame sent twice with the same message_id is logged and relayed once",
    kill="treat a repeated message_id as a new frame",
)
async def dedupe_live(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    frame = await client.send("agent.text.delta", {"block_id": "b1", "delta": "once"})
    await client.send_frame(frame)
    (before,) = await ctx.barrier(client, [edge])
    copies = [f for f in before if f.get("message_id") == frame["message_id"]]
    expect(len(copies) == 1, f"the edge got the frame {len(copies)} times")


@case(
    id="notes-7/dedupe-history",
    level="MUST",
    description="a frame already logged live is left out of the client's history when sent again",
    kill="keep history frames whose message_id is already in the log",
)
async def dedupe_history(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    live = await client.send("agent.state", {"state": "idle"})
    await edge.recv_until(lambda f: f.get("message_id") == live["message_id"], what="the frame")
    client.drop()
    again = await ctx.client(create=False, participant_id=client.participant_id)
    fresh = dict(live, message_id=new_id(), timestamp=now_iso())
    history = await again.send(
        "session.history",
        {
            "frames": [live, fresh],
            "buffer_status": {"policy_applied": "RING", "truncated": False, "lost_frame_count": 0},
            "last_sync_timestamp": live["timestamp"],
            "last_message_id": live["message_id"],
        },
    )
    frames = await edge.recv_until(
        lambda f: f.get("message_id") == history["message_id"], what="the client's history"
    )
    relayed = frames[-1].get("payload", {}).get("frames")
    if not isinstance(relayed, list):
        fail("the relayed session.history has no frames list")
        return
    ids = [f.get("message_id") for f in relayed if isinstance(f, dict)]
    expect(live["message_id"] not in ids, "the already-logged frame is inside the relayed history")
    expect(fresh["message_id"] in ids, "the new frame is missing from the relayed history")
    again_live = [f for f in frames[:-1] if f.get("message_id") == live["message_id"]]
    expect(not again_live, "the already-logged frame was relayed a second time")


@case(
    id="notes-15.3/head-seq",
    level="MUST",
    description="welcome.session.head_seq is the seq of the last frame in the log",
    kill="report head_seq as the next seq to assign (head + 1)",
)
async def head_seq(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    sent = [await client.send("agent.state", {"state": s}) for s in ("thinking", "idle")]
    last = (await edge.recv_id(sent[-1]["message_id"], what="the client's frames")).frame
    late = await ctx.edge()
    head = late.welcome["payload"].get("session", {}).get("head_seq")
    expect(
        head == last.get("seq"), f"head_seq {head!r}, but the last frame has seq {last.get('seq')}"
    )


@case(
    id="notes-15.4/backlog-excludes-own-frames",
    level="MUST",
    description="a reattaching client's backlog holds what others sent, never its own frames",
    kill="put the participant's own frames into its backlog",
)
async def backlog_excludes_own(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    first = await edge.send("user.message", {"text": "the cursor"})
    cursor = (await client.recv_id(first["message_id"], what="the edge's first frame")).frame
    own = [await client.send("agent.state", {"state": s}) for s in ("thinking", "idle")]
    # Not a second user.message: with no turn started since the first, it would wait for the
    # run the first one asked for (notes §17.3).
    other = await edge.send("control.cancel", {})
    await client.recv_id(other["message_id"], what="the edge's control.cancel")
    client.drop()
    again = await ctx.client(
        create=False,
        participant_id=client.participant_id,
        resume={"last_seq": cursor.get("seq"), "last_message_id": cursor.get("message_id")},
    )
    history = await again.recv(what="session.history right after the welcome")
    expect(history.get("type") == "session.history", f"got {history.get('type')!r} after welcome")
    frames = history.get("payload", {}).get("frames", [])
    ids = [f.get("message_id") for f in frames if isinstance(f, dict)]
    mine = [f["message_id"] for f in own if f["message_id"] in ids]
    expect(not mine, f"the backlog holds {len(mine)} of the client's own frames")
    expect(other["message_id"] in ids, "the backlog lacks the edge's frame sent after the cursor")


def _history_ids(frame: dict[str, Any]) -> list[Any]:
    expect(frame.get("type") == "session.history", f"got {frame.get('type')!r} after the welcome")
    frames = frame.get("payload", {}).get("frames", [])
    return [f.get("message_id") for f in frames if isinstance(f, dict)]


@case(
    id="notes-5/reattach-by-participant-id",
    level="MUST",
    description="a reattach by participant_id alone gets the frames after what it was last sent",
    kill="stop tracking what was written to a participant's socket (its cursor)",
    uses=("presence", "rest-sessions"),
)
async def reattach_by_participant(ctx: Context) -> None:
    client = await ctx.client()
    watcher = await ctx.edge()
    edge = await ctx.edge()
    seen = await client.send("agent.state", {"state": "thinking"})
    await edge.recv_id(seen["message_id"], what="the first frame")
    await edge.close()
    # Frames sent before the master noticed the close may rightly count as written to the
    # dying socket: wait for the detach, or else accept any such prefix as delivered.
    observed = await ctx.detached(edge, watcher, required=False)
    missed = [await client.send("agent.state", {"state": s}) for s in ("responding", "idle")]
    await ctx.barrier(client, [watcher])
    again = await ctx.edge(participant_id=edge.participant_id)
    expect(again.welcome["payload"].get("resumed") is True, "the edge's reattach was not resumed")
    ids = _history_ids(await again.recv(what="session.history right after the welcome"))
    expect(seen["message_id"] not in ids, "the backlog repeats a frame the edge already had")
    _expect_missed(ids, [f["message_id"] for f in missed], observed=observed)


def _expect_missed(ids: list[Any], missed: list[str], *, observed: bool) -> None:
    """The backlog holds the frames sent after the detach (a suffix of them if unobserved)."""
    got = [m for m in ids if m in missed]
    if observed:
        lost = [m for m in missed if m not in ids]
        expect(not lost, f"the backlog lacks {len(lost)} frame(s) sent while the edge was away")
        return
    expect(
        got == missed[len(missed) - len(got) :],
        "the backlog's frames sent after the close are not the newest ones in order",
    )


@case(
    id="notes-7/ack-cursor",
    level="SHOULD",
    description="after connection.ack the backlog starts after the acknowledged seq",
    kill="ignore connection.ack",
    uses=("presence", "rest-sessions"),
)
async def ack_cursor(ctx: Context) -> None:
    client = await ctx.client()
    watcher = await ctx.edge()
    edge = await ctx.edge()
    sent = [await client.send("agent.state", {"state": s}) for s in ("thinking", "responding")]
    first = (await edge.recv_id(sent[0]["message_id"], what="the first frame")).frame
    await edge.recv_id(sent[1]["message_id"], what="the second frame")
    await edge.send("connection.ack", {"last_seq": first.get("seq")})
    await edge.close()
    observed = await ctx.detached(edge, watcher, required=False)
    later = await client.send("agent.state", {"state": "idle"})
    await ctx.barrier(client, [watcher])
    again = await ctx.edge(participant_id=edge.participant_id)
    ids = _history_ids(await again.recv(what="session.history right after the welcome"))
    expect(sent[0]["message_id"] not in ids, "the backlog repeats the acknowledged frame")
    expect(
        sent[1]["message_id"] in ids,
        "the backlog lacks the frame sent after the acknowledged seq (cursor ignored the ack)",
    )
    _expect_missed(ids, [later["message_id"]], observed=observed)
