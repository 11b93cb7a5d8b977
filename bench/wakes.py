"""How late a wake is (notes §17.5): ``rawp serve --store sqlite:FILE`` with N attached
clients, each asking for one revisit at the same moment 2 s ahead; each client times its
``session.wake`` against the ``at`` it asked for. Then the same with the clients away: the
time until every wake is logged and listed due (``GET /v1/wakes?due=true``).

The sweep runs every 0.2 s, so a wake is due at most that late plus the time to log it;
the burst shows what logging N wakes at once costs. ``--quick``: 50 sessions, else 500.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import statistics
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Final

from websockets.asyncio.client import connect

from ._procs import API_KEY, start_master
from ._report import environment, figure, figures_table, now_iso

__all__ = ["DESCRIPTION", "NAME", "markdown", "run"]

NAME: Final = "wakes"
DESCRIPTION: Final = "wake lateness (due → received) for N attached clients due at once, SQLite"

AHEAD_S: Final = 2.0


def _frame(session_id: str, type_: str, payload: dict[str, Any]) -> str:
    return json.dumps(
        {
            "type": type_,
            "message_id": str(uuid.uuid4()),
            "session_id": session_id,
            "timestamp": dt.datetime.now(dt.UTC).isoformat(),
            "payload": payload,
        }
    )


async def _client(ws_url: str, session_id: str, due: dt.datetime, stay: bool) -> float | None:
    """One client: create, ask, then wait for its wake (``stay``) or leave; its lateness."""
    async with connect(ws_url, subprotocols=["rawp.1"]) as ws:  # type: ignore[list-item]
        hello = {"protocol_version": "1.0.2", "role": "client", "token": API_KEY, "create": {}}
        await ws.send(_frame(session_id, "connection.hello", hello))
        await ws.recv()
        at = due.isoformat().replace("+00:00", "Z")
        await ws.send(_frame(session_id, "session.revisit.request", {"revisit_id": "r", "at": at}))
        if not stay:
            await asyncio.sleep(0.3)
            return None
        while True:
            frame = json.loads(await ws.recv())
            if frame["type"] == "session.wake":
                return time.time() - due.timestamp()


def _due_listed(http_url: str) -> int:
    count, cursor = 0, ""
    while True:
        request = urllib.request.Request(
            f"{http_url}/v1/wakes?due=true&limit=500{cursor}",
            headers={"Authorization": f"Bearer {API_KEY}"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            page = json.loads(answer.read())
        count += len(page["wakes"])
        if page["next_cursor"] is None:
            return count
        cursor = f"&cursor={page['next_cursor']}"


async def _round(n: int, stay: bool, directory: Path) -> dict[str, Any]:
    store = f"sqlite:{directory / f'wakes-{uuid.uuid4().hex[:8]}.db'}"
    master = await start_master(["--store", store], rawp_serve=True)
    try:
        due = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=AHEAD_S + n / 200)
        prefix = uuid.uuid4().hex[:8]
        tasks = [
            asyncio.create_task(_client(master.ws_url, f"s-{prefix}-{i}", due, stay))
            for i in range(n)
        ]
        if stay:
            late = [x for x in await asyncio.gather(*tasks) if x is not None]
            return {"n": n, "late_s": sorted(late)}
        await asyncio.gather(*tasks)
        while _due_listed(master.http_url) < n:
            await asyncio.sleep(0.05)
        return {"n": n, "all_due_after_s": time.time() - due.timestamp()}
    finally:
        await master.stop()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run both rounds."""
    n = 50 if getattr(args, "quick", False) else 500
    with tempfile.TemporaryDirectory() as tmp:
        attached = asyncio.run(_round(n, True, Path(tmp)))
        away = asyncio.run(_round(n, False, Path(tmp)))
    late = attached["late_s"]
    p50 = statistics.median(late)
    p99 = late[min(len(late) - 1, int(len(late) * 0.99))]
    figures = [
        figure(f"wake lateness p50 ({n} due at once)", p50 * 1000, "ms"),
        figure(
            f"wake lateness p99 ({n} due at once)", p99 * 1000, "ms", aim="≤ 1 s", met=p99 <= 1.0
        ),
        figure(f"wake lateness max ({n} due at once)", late[-1] * 1000, "ms"),
        figure(
            f"all {n} wakes of clients away logged and listed due",
            away["all_due_after_s"] * 1000,
            "ms after at",
        ),
    ]
    return {
        "name": NAME,
        "when": now_iso(),
        "environment": environment(),
        "sessions": n,
        "figures": figures,
        "attached": attached,
        "away": away,
    }


def markdown(result: dict[str, Any]) -> str:
    """The report."""
    return f"# Wakes\n\n{DESCRIPTION}.\n\n" + figures_table(result["figures"])
