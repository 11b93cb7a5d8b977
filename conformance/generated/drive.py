"""Play one generated session against a master and compare it with the model, exchange by
exchange.

The client attaches (creating the session) and the observer attaches resuming at seq 0; then
each step is carried out and every participant reads exactly the frames the model says it
must receive, in order, each compared as it arrives; a socket the model says closes must close
with its code and nothing before. The first disagreement ends the session (FAIL), marked in its
transcript. A final rename by the observer reaches everyone attached and shows nothing else was
pending.

No verdict depends on the clock. Each step waits for an observable signal: the frames it must
produce, a close, or — for a drop — the participant's state in ``GET /v1/sessions/{id}``
(rawp-notes §10). The reattach window is read from the welcome (``reattach_window_ms``): a
participant that stayed detached for half of it before its reattach (or the session's end)
makes the session SKIP, naming the window it would need, rather than pass or fail by timing.
The heartbeat (``heartbeat_interval_ms``) bounds how long a detach may take to be noticed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Final, Literal

import aiohttp

from ..case import CaseFailed
from ..peer import HandshakeRefused, Peer, describe
from ..runner import Context, Target
from ..transcript import Transcript
from ..wire import PRESENCE
from .model import CLIENT, Backlog, Hello, Model, Outcome, Refusal
from .steps import OBSERVER, SESSION_PLACEHOLDER, Step

__all__ = ["DISAGREEMENT", "END_OF_SESSION", "Played", "play"]

DISAGREEMENT: Final = "✗ first disagreement"
"""How the transcript marks the exchange where the master and the model first differ."""
END_OF_SESSION: Final = "end of the session: its sessions are deleted and its sockets closed"
"""Marks where the session ends in its transcript and the cleanup (not judged) begins."""
_NAME: Final = "generated"
_POLL_S: Final = 0.005


class _Disagree(Exception):
    """The master did something else than the model says."""


class _Skip(Exception):
    """The session cannot be judged against this master without racing its clock."""


@dataclass
class Played:
    """One session's verdict: PASS, FAIL (a disagreement) or SKIP (why)."""

    status: Literal["PASS", "FAIL", "SKIP"]
    details: str
    transcript: Transcript
    step: int | None = None
    """The step at which the master and the model first differed."""


async def play(
    steps: list[Step],
    target: Target,
    http: aiohttp.ClientSession,
    *,
    session_id: str,
    timeout: float,
    read_timeout: float,
) -> Played:
    """Run ``steps`` as session ``session_id``; never raises (but cancellation).

    ``timeout`` is per step: the session may take ``timeout`` × (its steps + 2, for the
    setup and the final rename). ``read_timeout`` bounds the wait for one frame or close.
    """
    timeout *= len(steps) + 2
    ctx = Context(target=target, http_session=http, session_id=session_id, timeout=timeout)
    game = _Game(ctx, steps, read_timeout)
    try:
        async with asyncio.timeout(timeout):
            await game.run()
        return Played("PASS", "", ctx.transcript)
    except _Disagree as exc:
        return Played("FAIL", str(exc), ctx.transcript, step=game.index)
    except _Skip as exc:
        ctx.transcript.add("runner", "note", f"skipped: {exc}")
        return Played("SKIP", str(exc), ctx.transcript)
    except TimeoutError:
        message = f"step {game.index}: the session timed out after {timeout:.1f}s"
        ctx.transcript.add("runner", "note", f"{DISAGREEMENT}: {message}")
        return Played("FAIL", message, ctx.transcript, step=game.index)
    finally:
        ctx.transcript.add("runner", "note", END_OF_SESSION)
        try:
            await ctx.cleanup()
        except Exception:
            pass


class _Game:
    def __init__(self, ctx: Context, steps: list[Step], read_timeout: float) -> None:
        self.ctx = ctx
        self.steps = steps
        self.read_timeout = read_timeout
        self.sid = ctx.session_id
        self.peers: dict[str, Peer] = {}
        self.pids: dict[str, str] = {}
        self.detached_at: dict[str, float] = {}
        self.last_seq: dict[str, int] = {}
        self.index = 0
        self.window_s = 0.0
        self.heartbeat_s = 0.0
        self.model: Model | None = None
        self.size = 0
        """Bytes of the last frame read (as delivered)."""

    # --- verdicts ------------------------------------------------------------------------

    def disagree(self, message: str) -> None:
        text = f"step {self.index}: {message}"
        self.ctx.transcript.add("runner", "note", f"{DISAGREEMENT}: {text}")
        raise _Disagree(text)

    def note(self, text: str) -> None:
        self.ctx.transcript.add("runner", "note", text)

    # --- the session ---------------------------------------------------------------------

    async def run(self) -> None:
        await self.setup()
        for index, step in enumerate(self.steps, 1):
            self.index = index
            await self.do(step)
        self.index = len(self.steps) + 1
        model = self.model
        assert model is not None
        if not model.ended and model.members[OBSERVER].attached:
            await self.do(self.sync(model))

    async def setup(self) -> None:
        try:
            client = await self.hello(CLIENT, "client", create={"name": _NAME})
        except CaseFailed as exc:
            self.disagree(f"the client could not attach: {exc}")
        payload = client.welcome.get("payload", {})
        try:
            self.window_s = float(payload["reattach_window_ms"]) / 1000
            self.heartbeat_s = float(payload.get("heartbeat_interval_ms") or 0) / 1000
            capacity = int(payload["buffer"]["capacity_bytes"])
        except (KeyError, TypeError, ValueError):
            self.disagree("the welcome lacks reattach_window_ms or buffer.capacity_bytes")
        self.model = Model(self.sid, capacity=capacity, name=_NAME)
        self.check_welcome(client, Hello(member=CLIENT, role="client", name=_NAME))
        observer = await self.hello(OBSERVER, "edge", resume={"last_seq": 0})
        empty = Backlog(
            (),
            {
                "policy_applied": "RING",
                "truncated": False,
                "lost_frame_count": 0,
                "buffer_high_watermark": 0,
            },
        )
        self.check_welcome(observer, Hello(member=OBSERVER, role="edge", name=_NAME, backlog=empty))
        await self.check_backlog(observer, empty)

    def sync(self, model: Model) -> Step:
        digest = hashlib.sha256(f"{self.sid}:{len(self.steps)}".encode()).digest()
        frame = {
            "type": "session.renamed",
            "message_id": str(uuid.UUID(bytes=digest[:16], version=4)),
            "session_id": SESSION_PLACEHOLDER,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "payload": {
                "session_id": SESSION_PLACEHOLDER,
                "name": model.state.name,
                "renamed_by": "edge",
            },
        }
        return Step("send", OBSERVER, json.dumps(frame, separators=(",", ":")), note="sync")

    async def hello(self, name: str, role: str, **fields: Any) -> Peer:
        try:
            peer = await self.ctx.connect(label=name)
        except HandshakeRefused as exc:
            self.disagree(f"{name}: {exc}")
            raise
        await peer.hello(
            self.sid, role=role, token=self.ctx.target.api_key, presence=False, **fields
        )
        try:
            await peer.read_welcome()
        except CaseFailed as exc:
            self.disagree(str(exc))
        self.peers[name] = peer
        self.pids[name] = peer.participant_id
        self.last_seq[name] = 0
        return peer

    # --- one step ------------------------------------------------------------------------

    def check_clock(self, model: Model) -> None:
        now = time.monotonic()
        for name, since in self.detached_at.items():
            member = model.members.get(name)
            if member is None or member.attached or model.ended or self.window_s < 0:
                continue  # a window of -1: the session never ends by the clock
            if now - since >= self.window_s / 2:
                need = max(2 * (now - since), 1.0)
                raise _Skip(
                    f"{name} stayed detached {now - since:.2f}s, half of the reattach window "
                    f"the welcome gives ({self.window_s * 1000:.0f} ms): its reattach would race "
                    f"the clock; run the master with a reattach window of at least {need:.0f} s"
                )

    async def do(self, step: Step) -> None:
        model = self.model
        assert model is not None
        self.check_clock(model)
        outcome = model.apply(step)
        if outcome is None:
            self.note(f"step {self.index}: {step.describe()} — does not apply (actor absent)")
            return
        if isinstance(outcome, Refusal):
            raise _Skip(f"step {self.index}: the model cannot judge it: {outcome.reason}")
        self.note(f"step {self.index}: {step.describe()}")
        try:
            await self.act(step, outcome)
            await self.deliveries(outcome)
            await self.closes(outcome)
        except CaseFailed as exc:
            self.disagree(str(exc))
        if outcome.hello is not None and outcome.hello.refused is None:
            self.detached_at.pop(outcome.hello.member, None)

    async def act(self, step: Step, outcome: Outcome) -> None:
        if step.kind == "send":
            await self.peers[step.actor].send_raw(step.text(self.sid))
        elif step.kind == "drop":
            peer = self.peers[step.actor]
            peer.drop()
            self.detached_at[step.actor] = time.monotonic()
            await self.wait_detached(step.actor)
        elif step.kind == "delete":
            status, _ = await self.ctx.http("DELETE", f"/v1/session/{self.sid}")
            if status != outcome.delete_status:
                self.disagree(f"DELETE answered HTTP {status}, expected {outcome.delete_status}")
        else:
            assert outcome.hello is not None
            await self.answer(step, outcome.hello)

    async def answer(self, step: Step, hello: Hello) -> None:
        fields: dict[str, Any] = {}
        if hello.participant is not None:
            fields["participant_id"] = self.pids[hello.participant]
        if step.policy is not None:
            fields["buffer"] = {"policy": step.policy, "capacity_bytes": step.capacity}
        if step.resume:
            fields["resume"] = {"last_seq": 0}
        label = step.actor if hello.refused is None else f"{step.actor}?"
        if hello.refused is not None:
            peer = await self.ctx.connect(label=label)
            await peer.hello(
                self.sid, role=hello.role, token=self.ctx.target.api_key, presence=False, **fields
            )
            frames = await self.read_close(peer)
            if frames or peer.close_code != hello.refused:
                got = ", ".join(describe(f) for f in frames) or "nothing"
                self.disagree(
                    f"{label}: expected the hello refused with close {hello.refused}, got "
                    f"{got} then close {peer.close_code}"
                )
            return
        old = self.peers.get(step.actor) if hello.superseded else None
        peer = await self.hello(step.actor, hello.role, **fields)
        if old is not None:
            frames = await self.read_close(old)
            if frames or old.close_code != 4409:
                got = ", ".join(describe(f) for f in frames) or "nothing"
                self.disagree(
                    f"{step.actor}: the connection taken over must close 4409 (superseded); "
                    f"got {got} then close {old.close_code}"
                )
        self.check_welcome(peer, hello)
        if hello.backlog is not None:
            await self.check_backlog(peer, hello.backlog)

    async def read_close(self, peer: Peer) -> list[dict[str, Any]]:
        """What ``peer`` reads until the master closes it (bounded by the read timeout)."""
        try:
            frames = await asyncio.wait_for(peer.expect_close(), self.read_timeout)
        except TimeoutError:
            self.disagree(
                f"{peer.label}: still open after {self.read_timeout:.1f}s, expected a close"
            )
        return [f for f in frames if f.get("type") != PRESENCE]

    async def wait_detached(self, name: str) -> None:
        """Until ``GET /v1/sessions/{id}`` no longer lists ``name`` attached (rawp-notes §10)."""
        pid = self.pids[name]
        url = f"{self.ctx.target.http_url.rstrip('/')}/v1/sessions/{self.sid}"
        headers = {"Authorization": f"Bearer {self.ctx.target.api_key}"}
        limit = time.monotonic() + self.read_timeout + 2 * self.heartbeat_s
        while True:
            async with self.ctx.http_session.get(url, headers=headers) as response:
                if response.status != 200:
                    model = self.model
                    assert model is not None
                    self.check_clock(model)  # the session may have ended by the clock
                    raise _Skip(
                        f"GET /v1/sessions/{{id}} answered {response.status}: without it a "
                        "participant's detach is not observable (rawp-notes §10)"
                    )
                body = await response.json(content_type=None)
            states = [
                p.get("state")
                for p in (body or {}).get("participants") or []
                if isinstance(p, dict) and p.get("participant_id") == pid
            ]
            if not states or states[0] != "attached":
                self.ctx.transcript.add("http", "http", f"GET /v1/sessions/{{id}}: {name} detached")
                return
            if time.monotonic() > limit:
                self.disagree(f"{name} dropped but GET /v1/sessions/{{id}} still lists it attached")
            await asyncio.sleep(_POLL_S)

    # --- comparing -----------------------------------------------------------------------

    def check_welcome(self, peer: Peer, hello: Hello) -> None:
        payload = peer.welcome.get("payload", {})
        session = payload.get("session") or {}
        model = self.model
        checks: list[tuple[str, Any, Any]] = [
            ("resumed", payload.get("resumed"), hello.resumed),
            ("session.status", session.get("status"), hello.status),
            ("session.name", session.get("name"), hello.name),
        ]
        if hello.participant is not None:
            checks.append(
                ("participant_id", payload.get("participant_id"), self.pids[hello.participant])
            )
            checks.append(
                (
                    "received.last_message_id",
                    (payload.get("received") or {}).get("last_message_id"),
                    hello.received_last,
                )
            )
        if model is not None and hello.member in model.members:
            member = model.members[hello.member]
            granted = payload.get("buffer") or {}
            checks.append(("buffer.policy", granted.get("policy"), member.policy))
            checks.append(("buffer.capacity_bytes", granted.get("capacity_bytes"), member.capacity))
        for what, got, expected in checks:
            if got != expected:
                self.disagree(f"{peer.label}: welcome {what} is {got!r}, expected {expected!r}")

    async def check_backlog(self, peer: Peer, backlog: Backlog) -> None:
        frame = await self.next(peer, "its backlog (session.history)")
        if frame.get("type") != "session.history":
            self.disagree(f"{peer.label}: expected its backlog, got {describe(frame)}")
        payload = frame.get("payload") or {}
        status = payload.get("buffer_status") or {}
        for key, value in backlog.buffer_status.items():
            if status.get(key) != value:
                self.disagree(
                    f"{peer.label}: backlog buffer_status.{key} is {status.get(key)!r}, "
                    f"expected {value!r}"
                )
        got = [f for f in payload.get("frames") or [] if f.get("type") != PRESENCE]
        want = list(backlog.frames)
        for position, expected in enumerate(want):
            if position >= len(got):
                self.disagree(
                    f"{peer.label}: the backlog ends after {len(got)} frames; expected "
                    f"{expected.describe()} next"
                )
            why = expected.mismatch(got[position])
            if why is not None:
                self.disagree(
                    f"{peer.label}: backlog frame {position + 1} is {describe(got[position])}: "
                    f"{why}; expected {expected.describe()}"
                )
        if len(got) > len(want):
            self.disagree(
                f"{peer.label}: the backlog holds {describe(got[len(want)])} beyond the "
                f"{len(want)} expected"
            )

    async def next(self, peer: Peer, what: str, held: float = 0.0) -> dict[str, Any]:
        while True:
            received = await peer.recv_raw(what=what, timeout=self.read_timeout + held)
            if received.frame.get("type") != PRESENCE:
                self.size = received.size
                return received.frame

    async def deliveries(self, outcome: Outcome) -> None:
        model = self.model
        assert model is not None
        for name, expected_frames in outcome.deliveries.items():
            peer = self.peers[name]
            for expected in expected_frames:
                frame = await self.next(peer, expected.describe(), expected.held)
                why = expected.mismatch(frame)
                if why is not None:
                    self.disagree(
                        f"{name} received {describe(frame)}: {why}; expected {expected.describe()}"
                    )
                if expected.entry is not None:
                    seq = frame.get("seq")
                    if not isinstance(seq, int) or seq <= self.last_seq[name]:
                        self.disagree(f"{name}: seq {seq!r} after {self.last_seq[name]}")
                    else:
                        self.last_seq[name] = seq
                    if name == OBSERVER:
                        model.observed(expected.entry, self.size)

    async def closes(self, outcome: Outcome) -> None:
        for name, code in outcome.closes.items():
            peer = self.peers[name]
            frames = await self.read_close(peer)
            if frames or peer.close_code != code:
                got = ", ".join(describe(f) for f in frames) or "nothing more"
                self.disagree(f"{name}: expected close {code}; got {got}, close {peer.close_code}")
