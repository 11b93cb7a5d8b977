"""Run conformance cases against one master (RAWP 1.0.2 §7, rawp-notes §2–§15).

Each case gets a fresh session id, its own deadline (``--timeout``) and a :class:`Context`
that opens peers and talks HTTP. Whatever a case raises becomes a result, never a crash:

* ``PASS`` — the master followed the rule;
* ``FAIL`` — a MUST was broken (or the case could not complete: timeout, error);
* ``WARN`` — a SHOULD was broken;
* ``SKIP`` — the master's configuration makes the check impossible, or the master lacks a
  feature the case needs beyond the rule it checks (the reason says which; see :class:`Features`).

Features a case relies on (:data:`~.case.FEATURES`) are probed once per run, at the first case
that declares them (:class:`Features`); the probes' verdicts and transcripts go into the report.
Every case records its wire transcript (:mod:`.transcript`).

After the case, its peers are closed and its sessions deleted, bounded in time, so one case
never leaks into the next.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

import aiohttp

from protocol.names import one_line

from .case import FEATURES, Case, CaseFailed, CaseSkipped, Feature
from .peer import HandshakeRefused, Peer
from .transcript import Transcript
from .wire import presence_change

__all__ = [
    "PROBE_TIMEOUT_S",
    "STATUSES",
    "Context",
    "Features",
    "MissingPrerequisite",
    "Prerequisite",
    "Result",
    "Status",
    "Target",
    "run_case",
    "run_cases",
    "verdict",
]

Status: TypeAlias = Literal["PASS", "FAIL", "WARN", "SKIP"]
STATUSES: Final[tuple[Status, ...]] = ("PASS", "FAIL", "WARN", "SKIP")
_CLEANUP_S: Final = 3.0
_POLL_S: Final = 0.02
PROBE_TIMEOUT_S: Final = 3.0
"""At most this long for one feature probe (shorter when the per-case timeout is)."""


class MissingPrerequisite(CaseSkipped):
    """The case cannot be judged: the master lacks features it relies on (never a FAIL)."""

    def __init__(self, features: Sequence[str], why: str) -> None:
        names = ", ".join(features)
        super().__init__(f"missing prerequisite {names}: {why}")
        self.features = tuple(features)


@dataclass(frozen=True)
class Target:
    """The master under test.

    ``hello_timeout_s`` is the master's handshake timeout (notes §5: 10 s unless configured);
    the welcome does not carry it, so the operator says it. ``other_api_key`` belongs to a
    second workspace; without it the cross-workspace case SKIPs, naming that prerequisite.
    """

    ws_url: str
    http_url: str
    api_key: str
    hello_timeout_s: float = 10.0
    other_api_key: str | None = None
    """An API key of another workspace of the same master (rawp-notes §11, §13), if given."""


@dataclass
class Result:
    """What one case found."""

    case: Case
    status: Status
    details: str
    duration_s: float
    expected_failure: bool = False
    transcript: Transcript = field(default_factory=Transcript)
    missing: tuple[str, ...] = ()
    """Features the case relies on that the master lacks (skipped or fell back)."""
    setting: str = ""
    """For a SKIP: the master setting or runner flag that would let the case run."""

    @property
    def blocking(self) -> bool:
        """A MUST failure not listed as expected: makes the run exit 1."""
        return self.status == "FAIL" and not self.expected_failure

    @property
    def stale(self) -> bool:
        """Listed as an expected failure but passed."""
        return self.expected_failure and self.status == "PASS"


@dataclass
class Context:
    """What a case body works with: the target, its session id, peers, HTTP, its deadline."""

    target: Target
    http_session: aiohttp.ClientSession
    session_id: str
    timeout: float
    deadline: float = 0.0
    peers: list[Peer] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    transcript: Transcript = field(default_factory=Transcript)
    available: dict[str, bool] = field(default_factory=dict)
    _labels: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.timeout
        self.sessions.append(self.session_id)

    # --- time ----------------------------------------------------------------------------

    def remaining(self) -> float:
        """Seconds left before the case times out."""
        return self.deadline - time.monotonic()

    def _deadline(self) -> float:
        return self.deadline

    def note(self, text: str) -> None:
        """Add a line to the result's details (kept for PASS too)."""
        self.notes.append(text)
        self.transcript.add("runner", "note", text)

    # --- features ------------------------------------------------------------------------

    def has(self, feature: str) -> bool:
        """Whether the master offers ``feature`` (probed before the case; see :class:`Features`).

        A feature the case did not declare in ``needs`` or ``uses`` is unknown: False.
        """
        return self.available.get(feature, False)

    async def detached(self, peer: Peer, watcher: Peer | None = None, *, required: bool) -> bool:
        """Wait until the master shows it noticed ``peer``'s detach (rawp-notes §5).

        The signal is ``session.presence`` (detached or expired) at ``watcher`` when the master
        sends presence, else the participant's state in ``GET /v1/sessions/{id}`` (rawp-notes
        §10), polled until the case's deadline. Without either, returns False — or, when
        ``required``, skips the case naming both missing prerequisites.
        """
        pid = peer.participant_id
        if watcher is not None and self.has("presence"):

            def gone(frame: dict[str, Any]) -> bool:
                change = presence_change(frame, pid)  # one change, or coalesced ones
                return change is not None and change.get("state") in ("detached", "expired")

            await watcher.recv_until(gone, what=f"presence detached of {peer.label}")
            return True
        if self.has("rest-sessions"):
            self.note(f"no presence: waited for {peer.label}'s detach in GET /v1/sessions/{{id}}")
            seen: str | None = ""
            while True:
                state = await self.participant_state(peer.session_id, pid)
                if state != seen:  # polled unrecorded: record each state once
                    self.transcript.add(
                        "http", "http", f"GET /v1/sessions/{{id}}: {peer.label} is {state}"
                    )
                    seen = state
                if state != "attached":
                    return True
                await asyncio.sleep(_POLL_S)
        if required:
            lacking = [f for f in ("presence", "rest-sessions") if not self.has(f)]
            raise MissingPrerequisite(
                lacking or ["presence"],
                "no signal (session.presence, GET /v1/sessions/{id}) shows when the master "
                f"noticed {peer.label}'s detach",
            )
        self.note(f"no presence and no REST sessions: {peer.label}'s detach is not observable")
        return False

    async def participant_state(self, session_id: str, participant_id: str) -> str | None:
        """``attached`` / ``detached`` from ``GET /v1/sessions/{id}``; None when not listed."""
        status, body = await self.http("GET", f"/v1/sessions/{session_id}", record=False)
        if status != 200 or not isinstance(body, dict):
            raise CaseFailed(f"GET /v1/sessions/{session_id} answered HTTP {status}")
        for participant in body.get("participants") or []:
            if isinstance(participant, dict) and participant.get("participant_id") == (
                participant_id
            ):
                state = participant.get("state")
                return str(state) if state is not None else None
        return None

    # --- sessions and peers --------------------------------------------------------------

    def new_session_id(self) -> str:
        """Another fresh session id for this case (deleted at cleanup)."""
        sid = f"{self.session_id}-{len(self.sessions)}"
        self.sessions.append(sid)
        return sid

    def _label(self, role: str) -> str:
        n = self._labels.get(role, 0) + 1
        self._labels[role] = n
        return role if role == "client" and n == 1 else f"{role}#{n}"

    async def connect(
        self, *, label: str = "socket", subprotocols: Sequence[str] | None = ("rawp.1",)
    ) -> Peer:
        """A WebSocket to the master without a hello."""
        peer = await Peer.connect(
            self.target.ws_url,
            label=label,
            deadline=self._deadline,
            subprotocols=subprotocols,
            transcript=self.transcript,
        )
        self.peers.append(peer)
        return peer

    async def send_hello(
        self,
        role: str,
        *,
        session_id: str | None = None,
        label: str | None = None,
        token: str | None = None,
        **fields: Any,
    ) -> Peer:
        """Connect and send a hello; the caller reads the answer."""
        peer = await self.connect(label=label or self._label(role))
        await peer.hello(
            session_id or self.session_id,
            role=role,
            token=self.target.api_key if token is None else token,
            **fields,
        )
        return peer

    async def attach(self, role: str, **fields: Any) -> Peer:
        """Connect, hello, and read the welcome (fails the case if refused)."""
        peer = await self.send_hello(role, **fields)
        await peer.read_welcome()
        return peer

    async def client(self, *, create: bool = True, **fields: Any) -> Peer:
        """Attach the session's client (creating the session by default)."""
        if create:
            fields.setdefault("create", {"name": "conformance"})
        return await self.attach("client", **fields)

    async def edge(self, **fields: Any) -> Peer:
        """Attach an edge."""
        return await self.attach("edge", **fields)

    async def refused(self, role: str, *, what: str, **fields: Any) -> int | None:
        """Send a hello that must be refused; returns the close code.

        Fails the case at once when the master answers with a welcome instead.
        """
        peer = await self.send_hello(role, **fields)
        while True:
            try:
                frame = await peer.recv(what=what)
            except CaseFailed:
                if peer.close_code is None:
                    raise
                return peer.close_code
            if frame.get("type") == "connection.welcome":
                raise CaseFailed(f"{peer.label}: got connection.welcome, expected {what}")

    # --- HTTP ----------------------------------------------------------------------------

    async def http(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        token: str | None = None,
        record: bool = True,
    ) -> tuple[int, Any]:
        """An HTTP request with the API key (or ``token``); returns the status and JSON body.

        The body is None when the answer is not JSON. Recorded in the transcript unless
        ``record`` is false (polling).
        """
        url = f"{self.target.http_url.rstrip('/')}{path}"
        headers = {"Authorization": f"Bearer {token or self.target.api_key}"}
        timeout = aiohttp.ClientTimeout(total=max(0.1, self.remaining()))
        sent = "" if body is None else " " + json.dumps(body, ensure_ascii=False)
        if record:
            self.transcript.add("http", "http", f"→ {method} {path}{sent}")
        async with self.http_session.request(
            method, url, headers=headers, json=body, timeout=timeout
        ) as response:
            text = await response.text(errors="replace")
            try:
                data = json.loads(text) if text else None
            except ValueError:
                data = None
            if record:
                self.transcript.add(
                    "http",
                    "http",
                    f"← {response.status} {method} {path} {text}".rstrip(),
                    http_status=response.status,
                )
            return response.status, data

    async def delete_session(self, session_id: str | None = None) -> int:
        """``DELETE /v1/session/{id}`` (RAWP §5.2, notes §9); returns the HTTP status."""
        sid = session_id or self.session_id
        status, _ = await self.http("DELETE", f"/v1/session/{sid}")
        return status

    # --- shared checks -------------------------------------------------------------------

    async def barrier(self, sender: Peer, observers: Iterable[Peer]) -> list[list[dict[str, Any]]]:
        """Make ``sender`` send a harmless relayed frame and read it at every observer.

        Frames from one sender are processed in order (notes §7), so whatever the sender sent
        before has been decided once the observers see this one. Returns, per observer, the
        frames read before the barrier. Clients send ``agent.state idle``; edges a
        ``control.cancel`` naming no turn (a ``user.message`` would wait while a turn is open:
        one run at a time, notes §17.3).
        """
        if sender.role == "client":
            frame = await sender.send("agent.state", {"state": "idle"})
        else:
            frame = await sender.send("control.cancel", {})
        mid = frame["message_id"]
        before: list[list[dict[str, Any]]] = []
        for observer in observers:
            frames = await observer.recv_until(
                lambda f: f.get("message_id") == mid,
                what=f"the barrier frame from {sender.label}",
            )
            before.append(frames[:-1])
        return before

    async def expect_error(self, peer: Peer, code: str, *, about: str) -> dict[str, Any]:
        """Read ``peer`` up to a ``session.error`` and require ``error_code == code``."""
        frame = await peer.recv_type("session.error", what=f"session.error {code} ({about})")
        payload = frame.get("payload", {})
        got = payload.get("error_code")
        if got != code:
            raise CaseFailed(f"{peer.label}: {about}: expected session.error {code}, got {got}")
        if payload.get("fatal") is not False:
            raise CaseFailed(f"{peer.label}: session.error {code} must carry fatal: false")
        return frame

    # --- cleanup -------------------------------------------------------------------------

    async def cleanup(self) -> None:
        """Delete this case's sessions and close its sockets (bounded, errors ignored)."""
        try:
            async with asyncio.timeout(_CLEANUP_S):
                for sid in self.sessions:
                    url = f"{self.target.http_url.rstrip('/')}/v1/session/{sid}?if_absent=ok"
                    headers = {"Authorization": f"Bearer {self.target.api_key}"}
                    try:
                        async with self.http_session.delete(url, headers=headers) as response:
                            await response.read()
                    except aiohttp.ClientError:
                        pass
                await asyncio.gather(*(p.close() for p in self.peers), return_exceptions=True)
        except TimeoutError:
            for peer in self.peers:
                peer.drop()


def _session_id(slug_of: str) -> str:
    slug = slug_of.split("/", 1)[-1][:40]
    return f"conf-{slug}-{secrets.token_hex(4)}"


ProbeBody: TypeAlias = Callable[[Context], Awaitable[None]]


@dataclass
class Prerequisite:
    """What the probe of one feature found: present or missing (and why), with its transcript."""

    feature: Feature
    present: bool
    details: str
    transcript: Transcript
    duration_s: float


class Features:
    """The features of one master, each probed once per run, when a case first declares it.

    A probe (:mod:`.probes`) is a short scenario that returns when the master offers the
    feature and raises otherwise; whatever it raises is the reason reported as missing.
    """

    def __init__(self, target: Target, http: aiohttp.ClientSession, *, timeout: float) -> None:
        self.target = target
        self.http = http
        self.timeout = min(timeout, PROBE_TIMEOUT_S)
        self.found: dict[str, Prerequisite] = {}

    async def find(self, name: str) -> Prerequisite:
        """The probe's verdict on ``name`` (runs the probe the first time)."""
        known = self.found.get(name)
        if known is not None:
            return known
        from .probes import PROBES

        ctx = Context(
            target=self.target,
            http_session=self.http,
            session_id=_session_id(f"probe/{name}"),
            timeout=self.timeout,
        )
        started = time.perf_counter()
        present, details = False, ""
        try:
            async with asyncio.timeout(self.timeout):
                await PROBES[name](ctx)
            present, details = True, "; ".join(ctx.notes) or "present"
        except (CaseFailed, CaseSkipped, HandshakeRefused) as exc:
            details = str(exc)
        except TimeoutError:
            details = f"the probe timed out after {self.timeout:.1f}s"
        except Exception as exc:  # a probe reports, it does not crash the run
            details = f"error in the probe: {type(exc).__name__}: {exc}"
        finally:
            try:
                await ctx.cleanup()
            except Exception:
                pass
        found = Prerequisite(
            feature=FEATURES[name],
            present=present,
            details=one_line(details),  # may quote the master: inert in every report
            transcript=ctx.transcript,
            duration_s=time.perf_counter() - started,
        )
        self.found[name] = found
        return found


async def run_case(
    case: Case,
    target: Target,
    http: aiohttp.ClientSession,
    *,
    timeout: float,
    expected_failure: bool = False,
    features: Features | None = None,
) -> Result:
    """Run one case with its own session id and deadline; never raises (but cancellation).

    The features the case relies on are probed first (once per ``features``); a missing one
    the case ``needs`` makes it SKIP, naming it; one it ``uses`` is reported as fallen back.
    """
    features = features or Features(target, http, timeout=timeout)
    available: dict[str, bool] = {}
    for name in case.prerequisites:
        available[name] = (await features.find(name)).present
    missing = tuple(name for name, present in available.items() if not present)
    budget = timeout + case.holds_s
    ctx = Context(
        target=target,
        http_session=http,
        session_id=_session_id(case.id),
        timeout=budget,
        available=available,
    )
    started = time.perf_counter()
    status: Status
    needed = [name for name in case.needs if name in missing]
    skipped_for: tuple[str, ...] = ()
    setting = ""
    try:
        if needed:
            reasons = "; ".join(f"{n}: {features.found[n].details}" for n in needed)
            raise MissingPrerequisite(needed, f"the master lacks it ({reasons})")
        async with asyncio.timeout(budget):
            await case.body(ctx)
        status, details = "PASS", "; ".join(ctx.notes)
    except MissingPrerequisite as exc:
        status, details = "SKIP", str(exc)
        skipped_for = exc.features
    except CaseSkipped as exc:
        status, details, setting = "SKIP", str(exc), exc.setting
    except CaseFailed as exc:
        status, details = "FAIL", str(exc)
    except TimeoutError:
        status, details = "FAIL", f"timed out after {budget:.1f}s"
    except HandshakeRefused as exc:
        status, details = "FAIL", str(exc)
    except Exception as exc:  # the runner reports, it does not crash
        status, details = "FAIL", f"error in the case: {type(exc).__name__}: {exc}"
    finally:
        try:
            await ctx.cleanup()
        except Exception:  # cleanup is best effort; the verdict is already made
            pass
    if status == "FAIL" and case.level == "SHOULD":
        status = "WARN"
    details = one_line(details)  # it may quote the master: inert in every report
    if status != "PASS" and details:
        ctx.transcript.add("runner", "note", f"verdict {status}: {details}")
    return Result(
        case=case,
        status=status,
        details=details,
        duration_s=time.perf_counter() - started,
        expected_failure=expected_failure,
        transcript=ctx.transcript,
        missing=tuple(dict.fromkeys((*missing, *skipped_for))),
        setting=setting,
    )


async def run_cases(
    target: Target,
    cases: Sequence[Case],
    *,
    timeout: float,
    expected_failures: frozenset[str] = frozenset(),
    on_result: Callable[[int, int, Result], None] | None = None,
    features: dict[str, Prerequisite] | None = None,
) -> list[Result]:
    """Run ``cases`` one after another; ``on_result(index, total, result)`` after each.

    ``features``, when given, receives what the run's probes found (for the report).
    """
    results: list[Result] = []
    async with aiohttp.ClientSession(trust_env=False) as http:
        book = Features(target, http, timeout=timeout)
        for index, case in enumerate(cases, 1):
            result = await run_case(
                case,
                target,
                http,
                timeout=timeout,
                expected_failure=case.id in expected_failures,
                features=book,
            )
            results.append(result)
            if on_result is not None:
                on_result(index, len(cases), result)
    if features is not None:
        features.update(book.found)
    return results


def verdict(results: Iterable[Result]) -> str:
    """The run's last word, for the summary and the HTML report alike: failed MUSTs, else
    OK — and then how many MUST cases were skipped, since a skipped MUST was not checked."""
    listed = list(results)
    failed = sum(1 for r in listed if r.blocking)
    if failed:
        return f"FAILED: {failed} MUST case(s) failed"
    skipped = sum(1 for r in listed if r.status == "SKIP" and r.case.level == "MUST")
    if skipped:
        return (
            f"OK, but {skipped} MUST case(s) SKIPPED: every MUST that ran passed (or is an "
            "expected failure); the skipped ones were not checked — each says above why, and "
            "what makes it run"
        )
    return "OK: every MUST passed (or is an expected failure)"
