"""Run conformance cases against one master (RAWP 1.0.2 §7, rawp-notes §2–§15).

Each case gets a fresh session id, its own deadline (``--timeout``) and a :class:`Context`
that opens peers and talks HTTP. Whatever a case raises becomes a result, never a crash:

* ``PASS`` — the master followed the rule;
* ``FAIL`` — a MUST was broken (or the case could not complete: timeout, error);
* ``WARN`` — a SHOULD was broken;
* ``SKIP`` — the master's configuration makes the check impossible (the reason says which).

After the case, its peers are closed and its sessions deleted, bounded in time, so one case
never leaks into the next.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

import aiohttp

from .case import Case, CaseFailed, CaseSkipped
from .peer import HandshakeRefused, Peer

__all__ = [
    "STATUSES",
    "Context",
    "Result",
    "Status",
    "Target",
    "run_case",
    "run_cases",
]

Status: TypeAlias = Literal["PASS", "FAIL", "WARN", "SKIP"]
STATUSES: Final[tuple[Status, ...]] = ("PASS", "FAIL", "WARN", "SKIP")
_CLEANUP_S: Final = 3.0


@dataclass(frozen=True)
class Target:
    """The master under test.

    ``hello_timeout_s`` is the master's handshake timeout (notes §5: 10 s unless configured);
    the welcome does not carry it, so the operator says it.
    """

    ws_url: str
    http_url: str
    api_key: str
    hello_timeout_s: float = 10.0


@dataclass
class Result:
    """What one case found."""

    case: Case
    status: Status
    details: str
    duration_s: float
    expected_failure: bool = False

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
            self.target.ws_url, label=label, deadline=self._deadline, subprotocols=subprotocols
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
        self, method: str, path: str, *, body: dict[str, Any] | None = None
    ) -> tuple[int, Any]:
        """An HTTP request with the API key; returns the status and the JSON body (or None)."""
        url = f"{self.target.http_url.rstrip('/')}{path}"
        headers = {"Authorization": f"Bearer {self.target.api_key}"}
        timeout = aiohttp.ClientTimeout(total=max(0.1, self.remaining()))
        async with self.http_session.request(
            method, url, headers=headers, json=body, timeout=timeout
        ) as response:
            try:
                data = await response.json(content_type=None)
            except ValueError:
                data = None
            return response.status, data

    async def delete_session(self, session_id: str | None = None) -> int:
        """``DELETE /v1/session/{id}`` (RAWP §5.2, notes §9); returns the HTTP status."""
        sid = session_id or self.session_id
        url = f"{self.target.http_url.rstrip('/')}/v1/session/{sid}"
        headers = {"Authorization": f"Bearer {self.target.api_key}"}
        timeout = aiohttp.ClientTimeout(total=max(0.1, self.remaining()))
        async with self.http_session.delete(url, headers=headers, timeout=timeout) as response:
            await response.read()
            return response.status

    # --- shared checks -------------------------------------------------------------------

    async def barrier(self, sender: Peer, observers: Iterable[Peer]) -> list[list[dict[str, Any]]]:
        """Make ``sender`` send a harmless relayed frame and read it at every observer.

        Frames from one sender are processed in order (notes §7), so whatever the sender sent
        before has been decided once the observers see this one. Returns, per observer, the
        frames read before the barrier. Clients send ``agent.state idle``; edges ``user.message``.
        """
        if sender.role == "client":
            frame = await sender.send("agent.state", {"state": "idle"})
        else:
            frame = await sender.send("user.message", {"text": "conformance barrier"})
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


def _session_id(case: Case) -> str:
    slug = case.id.split("/", 1)[1][:40]
    return f"conf-{slug}-{secrets.token_hex(4)}"


async def run_case(
    case: Case,
    target: Target,
    http: aiohttp.ClientSession,
    *,
    timeout: float,
    expected_failure: bool = False,
) -> Result:
    """Run one case with its own session id and deadline; never raises (but cancellation)."""
    ctx = Context(target=target, http_session=http, session_id=_session_id(case), timeout=timeout)
    started = time.perf_counter()
    status: Status
    try:
        async with asyncio.timeout(timeout):
            await case.body(ctx)
        status, details = "PASS", "; ".join(ctx.notes)
    except CaseSkipped as exc:
        status, details = "SKIP", str(exc)
    except CaseFailed as exc:
        status, details = "FAIL", str(exc)
    except TimeoutError:
        status, details = "FAIL", f"timed out after {timeout:.1f}s"
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
    return Result(
        case=case,
        status=status,
        details=details,
        duration_s=time.perf_counter() - started,
        expected_failure=expected_failure,
    )


async def run_cases(
    target: Target,
    cases: Sequence[Case],
    *,
    timeout: float,
    expected_failures: frozenset[str] = frozenset(),
    on_result: Callable[[int, int, Result], None] | None = None,
) -> list[Result]:
    """Run ``cases`` one after another; ``on_result(index, total, result)`` after each."""
    results: list[Result] = []
    async with aiohttp.ClientSession(trust_env=False) as http:
        for index, case in enumerate(cases, 1):
            result = await run_case(
                case,
                target,
                http,
                timeout=timeout,
                expected_failure=case.id in expected_failures,
            )
            results.append(result)
            if on_result is not None:
                on_result(index, len(cases), result)
    return results
