"""Seed 001's race: a DELETE and a re-open (attach with create) of the same session at once.

``python -m bench.delete_race --runs 2000 [--no-lock | --lock-only] [--transport hub|ws]``
(also ``python -m bench delete_race``). Prints the share of runs that ended inconsistent, with
and without the per-session lock (notes §9). The end-to-end test imports :func:`run_trials`,
so the number it asserts is the number printed here.

One run, on session ``race-<n>`` of one master:

1. a client attaches with ``create`` (the session exists, a participant is attached);
2. concurrently, each after a seeded number of ``asyncio.sleep(0)``: the master deletes the
   session (``Hub.delete``, or ``DELETE /v1/session/{id}`` over HTTP in the ``ws`` transport),
   and a client re-opens it — a hello with ``create`` that is, by a seeded coin, a reattach of
   the same participant or a new client;
3. after both finished, the end state is checked. Inconsistent (seed 001: "a live session with
   no stored history") means one of

   * ``attached_without_store`` — a connection that got its welcome and was not closed is
     attached to a session whose header / log the store no longer has;
   * ``attached_to_dead_session`` — such a connection is held by a session object this node no
     longer serves (deleted under it), so nothing it sends is logged where readers look;
   * ``live_session_without_store`` — the node serves a live session the store does not hold;
   * ``log_without_session`` — the store holds log entries but no header for the id.

The memory store never suspends inside a call, so on its own the only yields in the delete
path are the socket closes. To stand for a store on the network (Redis), every store call
first yields a seeded number of times (``--max-yields``, 0 disables it); so do the fake
sockets of the ``hub`` transport. With ``--max-yields 0`` the memory store shows how much of
the race a purely in-process store leaves.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import random
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, cast

import aiohttp
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from protocol import codec
from protocol.errors import HandshakeError
from protocol.frames import Hello
from relay.config import Settings
from relay.hub import Hub
from relay.logs import configure_logging
from relay.server import Master
from relay.session import Participant
from relay.store.base import Store
from relay.store.memory import MemoryStore

__all__ = ["DESCRIPTION", "NAME", "RaceResult", "markdown", "run", "run_trials"]

NAME: Final = "delete_race"
DESCRIPTION: Final = "seed 001: concurrent delete + re-open of one session, with/without lock"

API_KEY: Final = "rk_race_key"
Transport = Literal["hub", "ws"]
KINDS: Final = (
    "attached_without_store",
    "attached_to_dead_session",
    "live_session_without_store",
    "log_without_session",
)


@dataclass
class RaceResult:
    """The outcome of :func:`run_trials`."""

    runs: int
    lock: bool
    transport: Transport
    max_yields: int
    seed: int
    inconsistent: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def record(self, outcome: str, found: Sequence[str]) -> None:
        """Count one run."""
        self.outcomes[outcome] += 1
        if found:
            self.inconsistent += 1
            self.kinds.update(found)

    @property
    def share(self) -> float:
        """Inconsistent runs / runs."""
        return self.inconsistent / self.runs if self.runs else 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "runs": self.runs,
            "lock": self.lock,
            "transport": self.transport,
            "max_yields": self.max_yields,
            "seed": self.seed,
            "inconsistent": self.inconsistent,
            "share_percent": round(100 * self.share, 2),
            "kinds": dict(self.kinds),
            "outcomes": dict(self.outcomes),
            "seconds": round(self.seconds, 2),
        }


class _Jitter:
    """Seeded ``asyncio.sleep(0)`` counts: the interleaving of one run."""

    def __init__(self, max_yields: int) -> None:
        self.rng = random.Random(0)
        self.max_yields = max_yields

    async def __call__(self) -> None:
        if self.max_yields:
            for _ in range(self.rng.randint(0, self.max_yields)):
                await asyncio.sleep(0)


class JitterStore:
    """A store whose every call first yields to the event loop a seeded number of times."""

    def __init__(self, inner: Store, jitter: _Jitter) -> None:
        self._inner = inner
        self._jitter = jitter

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(attr):
            return attr
        jitter = self._jitter

        async def call(*args: Any, **kwargs: Any) -> Any:
            await jitter()
            return await attr(*args, **kwargs)

        return call


class FakeSink:
    """The socket calls the master makes (hub transport): framed writes are kept; a drain and
    a close yield like I/O would."""

    def __init__(self, jitter: _Jitter) -> None:
        self.jitter = jitter
        self.written: list[bytes] = []
        self.close_code: int | None = None

    @property
    def open(self) -> bool:
        return self.close_code is None

    @property
    def writable(self) -> bool:
        return self.close_code is None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    async def drain(self) -> None:
        await self.jitter()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if self.close_code is None:
            self.close_code = code  # decided now; the closing handshake takes a while
        await self.jitter()


def _settings(**changes: Any) -> Settings:
    base = Settings(
        host="127.0.0.1",
        ws_port=0,
        http_port=0,
        api_keys=(f"default:{API_KEY}",),
        reattach_window_s=30.0,
        hello_timeout_s=5.0,
        shutdown_timeout_s=2.0,
        node_id="m-race",
    )
    return replace(base, **changes)


def _hello(session_id: str, participant_id: str | None) -> bytes:
    payload: dict[str, Any] = {
        "protocol_version": "1.0.2",
        "role": "client",
        "token": API_KEY,
        "create": {"name": "race"},
    }
    if participant_id:
        payload["participant_id"] = participant_id
    frame = {
        "type": "connection.hello",
        "message_id": str(uuid.uuid4()),
        "session_id": session_id,
        "timestamp": "2026-11-29T09:00:00.000Z",
        "payload": payload,
    }
    return json.dumps(frame).encode()


async def _yields(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def _check(hub: Hub, store: Store, session_id: str, live: Sequence[object]) -> list[str]:
    """The inconsistencies of one run's end state.

    ``live``: the sinks (server-side connections) the master still keeps open for this run.
    """
    found: list[str] = []
    header = await store.get_session(session_id)
    entries = await store.read(session_id)
    session = hub.sessions.get(session_id)
    if header is None and entries:
        found.append("log_without_session")
    if session is not None and not session.terminated and header is None:
        found.append("live_session_without_store")
    served = set()
    if session is not None and not session.terminated:
        served = {id(p.sink) for p in session.participants.values()}
    for sink in live:
        if header is None:
            found.append("attached_without_store")
        elif id(sink) not in served:
            found.append("attached_to_dead_session")
    return found


def _outcome(reopened: bool, header_left: bool) -> str:
    """Which way the race went, for the outcome counts."""
    if not reopened:
        return "reopen_refused"
    return "reopened_after_delete" if header_left else "reopened_then_deleted"


async def _hub_trials(
    runs: int, lock: bool, seed: int, max_yields: int, on_run: Callable[[int], None] | None
) -> RaceResult:
    result = RaceResult(runs=runs, lock=lock, transport="hub", max_yields=max_yields, seed=seed)
    jitter = _Jitter(max_yields)
    store = cast(Store, JitterStore(MemoryStore(), jitter))
    hub = Hub(_settings(), store, session_lock=lock)
    await hub.start()
    try:
        for n in range(runs):
            jitter.rng = random.Random(f"{seed}:{n}")
            result.record(*await _hub_run(hub, store, jitter, f"race-{n}"))
            if on_run is not None:
                on_run(n)
    finally:
        await hub.stop()
    return result


async def _hub_run(hub: Hub, store: Store, jitter: _Jitter, sid: str) -> tuple[str, list[str]]:
    """One run driving the hub directly with fake sockets; (outcome, inconsistencies)."""
    rng = jitter.rng
    principal = await hub.auth.authenticate(API_KEY)
    first_hello = cast(Hello, codec.decode(_hello(sid, None)))
    _, first = await hub.attach(FakeSink(jitter), first_hello, principal)
    same = rng.random() < 0.5
    second_sink = FakeSink(jitter)
    second_hello = cast(Hello, codec.decode(_hello(sid, first.id if same else None)))
    attached: list[Participant] = [first]

    async def delete(delay: int) -> None:
        await _yields(delay)
        await hub.delete(sid, reason="master_request", deleted_by="master")

    async def reopen(delay: int) -> bool:
        await _yields(delay)
        try:
            _, participant = await hub.attach(second_sink, second_hello, principal)
        except HandshakeError as exc:
            second_sink.close_code = exc.close_code
            return False
        attached.append(participant)
        return True

    _, reopened = await asyncio.gather(delete(rng.randint(0, 12)), reopen(rng.randint(0, 12)))
    await _yields(4 * jitter.max_yields + 8)  # let the close task of a takeover start
    live = [p.sink for p in attached if cast(FakeSink, p.sink).close_code is None]
    outcome = _outcome(reopened, await store.get_session(sid) is not None)
    found = await _check(hub, store, sid, live)
    await _cleanup(hub, sid)
    for participant in attached:
        participant.outbox.close()  # also those a lock-less race orphaned
    return outcome, found


async def _cleanup(hub: Hub, session_id: str) -> None:
    """Close whatever a run left (also sessions orphaned by the race)."""
    session = hub.sessions.get(session_id)
    if session is not None:
        await hub.delete(session_id, reason="master_request", deleted_by="master")


async def _recv_welcome(ws: ClientConnection) -> str | None:
    """The participant id of the welcome, or None when the master closed the connection."""
    try:
        frame = json.loads(await ws.recv())
    except ConnectionClosed:
        return None
    if frame.get("type") != "connection.welcome":
        return None
    return str(frame["payload"]["participant_id"])


async def _ws_trials(
    runs: int, lock: bool, seed: int, max_yields: int, on_run: Callable[[int], None] | None
) -> RaceResult:
    result = RaceResult(runs=runs, lock=lock, transport="ws", max_yields=max_yields, seed=seed)
    jitter = _Jitter(max_yields)
    store = cast(Store, JitterStore(MemoryStore(), jitter))
    master = Master(_settings(), store=store, session_lock=lock)
    await master.start()
    try:
        async with aiohttp.ClientSession() as http:
            for n in range(runs):
                jitter.rng = random.Random(f"{seed}:{n}")
                result.record(*await _ws_run(master, http, store, jitter, f"race-{n}"))
                if on_run is not None:
                    on_run(n)
    finally:
        await master.stop()
    return result


async def _ws_run(
    master: Master, http: aiohttp.ClientSession, store: Store, jitter: _Jitter, sid: str
) -> tuple[str, list[str]]:
    """One run over real sockets; the delete in-process or over HTTP (seeded coin)."""
    rng = jitter.rng
    first = await connect(master.ws_url, subprotocols=["rawp.1"])  # type: ignore[list-item]
    await first.send(_hello(sid, None).decode())
    first_id = await _recv_welcome(first)
    assert first_id is not None, (sid, first.close_code, first.close_reason)
    # Upgraded beforehand, so only the hello races the delete.
    second = await connect(master.ws_url, subprotocols=["rawp.1"])  # type: ignore[list-item]
    same = rng.random() < 0.5
    via_http = rng.random() < 0.5

    async def delete(delay: int) -> None:
        await _yields(delay)
        if via_http:
            async with http.delete(
                f"{master.http_url}/v1/session/{sid}",
                headers={"Authorization": f"Bearer {API_KEY}"},
            ) as response:
                assert response.status in (200, 404), response.status
        else:
            await master.hub.delete(sid, reason="master_request", deleted_by="master")

    async def reopen(delay: int) -> bool:
        await _yields(delay)
        await second.send(_hello(sid, first_id if same else None).decode())
        return await _recv_welcome(second) is not None

    _, reopened = await asyncio.gather(delete(rng.randint(0, 12)), reopen(rng.randint(0, 12)))
    await _yields(4 * jitter.max_yields + 8)  # let the close task of a takeover start
    # What the master still keeps open (every earlier run's sockets are closed).
    live = [c for c in master.ws_connections if c.open]
    outcome = _outcome(reopened, await store.get_session(sid) is not None)
    found = await _check(master.hub, store, sid, live)
    await _cleanup(master.hub, sid)
    for ws in (first, second):
        await ws.close()
    return outcome, found


async def run_trials(
    runs: int,
    *,
    lock: bool = True,
    seed: int = 1,
    transport: Transport = "hub",
    max_yields: int = 3,
    on_run: Callable[[int], None] | None = None,
) -> RaceResult:
    """Run the experiment ``runs`` times on one in-process master; see the module docstring."""
    started = time.perf_counter()
    trials = _hub_trials if transport == "hub" else _ws_trials
    result = await trials(runs, lock, seed, max_yields, on_run)
    result.seconds = time.perf_counter() - started
    return result


# --- the bench framework and the command line ---------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    """For ``python -m bench``: both transports, with and without the lock."""
    runs = getattr(args, "runs", 2000)
    configure_logging(level="warning")
    rows = []
    for transport, count in (("hub", runs), ("ws", max(1, runs // 4))):
        for lock in (True, False):
            result = asyncio.run(
                run_trials(count, lock=lock, transport=transport)  # type: ignore[arg-type]
            )
            rows.append(result.as_dict())
    return {"rows": rows}


def markdown(result: dict[str, Any]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| transport | lock | runs | store yields ≤ | inconsistent | share | kinds | seconds |",
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for row in result["rows"]:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(row["kinds"].items())) or "—"
        lines.append(
            f"| {row['transport']} | {'on' if row['lock'] else 'off'} | {row['runs']} | "
            f"{row['max_yields']} | {row['inconsistent']} | {row['share_percent']:.2f} % | "
            f"{kinds} | {row['seconds']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.delete_race``."""
    parser = argparse.ArgumentParser(prog="python -m bench.delete_race", description=__doc__)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--transport", choices=("hub", "ws"), default="hub")
    parser.add_argument(
        "--max-yields",
        type=int,
        default=3,
        help="most asyncio.sleep(0) before each store call and socket write (0: none)",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--no-lock", action="store_true", help="only the lock-disabled run")
    which.add_argument("--lock-only", action="store_true", help="only the run with the lock")
    args = parser.parse_args(argv)
    configure_logging(level="warning")
    locks = [False] if args.no_lock else [True] if args.lock_only else [True, False]
    rows = []
    for lock in locks:
        result = asyncio.run(
            run_trials(
                args.runs,
                lock=lock,
                seed=args.seed,
                transport=args.transport,
                max_yields=args.max_yields,
            )
        )
        rows.append(result.as_dict())
        kinds = ", ".join(f"{k}={v}" for k, v in sorted(result.kinds.items())) or "none"
        print(
            f"lock {'on ' if lock else 'off'}: {result.inconsistent}/{result.runs} inconsistent "
            f"({100 * result.share:.1f} %) [{kinds}] outcomes {dict(result.outcomes)} "
            f"in {result.seconds:.1f} s",
            flush=True,
        )
    print(markdown({"rows": rows}), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
