"""Revoking an API key while 1,000 WebSockets use it (notes §16.9, §17.6).

An in-process master (``--store memory`` and SQLite) with one session: 1,000 edges attach
with one stored ``read`` key, then ``DELETE /v1/keys/{id}`` revokes it and the time until the
last of them is closed 4401 is measured, with how many closed 4401 (every one must). A second
key's edge stays attached. ``--quick``: 200 edges. The clients share the master's event loop,
so the figure is an upper bound of the master's own work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from ._report import environment, figure, figures_table, now_iso, table

__all__ = ["DESCRIPTION", "NAME", "markdown", "run"]

NAME: Final = "key_revoke"
DESCRIPTION: Final = "DELETE /v1/keys while 1,000 WebSockets use the key: time to close them all"
_ADMIN: Final = "rk_bench_admin"
_SID: Final = "s-revoke-bench"


def _hello(role: str, token: str) -> str:
    from protocol import codec

    return json.dumps(
        {
            "type": "connection.hello",
            "message_id": codec.new_message_id(),
            "session_id": _SID,
            "timestamp": codec.format_time(codec.now()),
            "payload": {"protocol_version": "1.0.2", "role": role, "token": token},
        }
    )


async def _edge(url: str, token: str) -> Any:
    from websockets.asyncio.client import connect

    ws = await connect(url, subprotocols=["rawp.1"], max_size=None)  # type: ignore[list-item]
    await ws.send(_hello("edge", token))
    welcome = json.loads(await ws.recv())
    assert welcome["type"] == "connection.welcome", welcome
    return ws


async def _close_code(ws: Any) -> int | None:
    try:
        async for _ in ws:
            pass
    except Exception:
        pass
    code: int | None = ws.close_code
    return code


async def _once(store: str, edges: int) -> dict[str, Any]:
    import aiohttp

    from relay.config import Settings
    from relay.server import Master

    settings = Settings(
        host="127.0.0.1",
        ws_port=0,
        http_port=0,
        store=store,
        api_keys=(f"default:{_ADMIN}",),
        max_edges_per_session=edges + 1,  # the survivor beside them
    )
    master = Master(settings)
    await master.start()
    try:
        secret, record = await master.hub.auth.create_key("default", ["read"])
        other, _ = await master.hub.auth.create_key("default", ["read", "write"])
        from websockets.asyncio.client import connect

        client = await connect(master.ws_url, subprotocols=["rawp.1"])  # type: ignore[list-item]
        create = json.loads(_hello("client", _ADMIN))
        create["payload"]["create"] = {"name": "bench"}
        await client.send(json.dumps(create))
        await client.recv()
        sockets = []
        for start in range(0, edges, 100):
            sockets += await asyncio.gather(
                *(_edge(master.ws_url, secret) for _ in range(start, min(edges, start + 100)))
            )
        survivor = await _edge(master.ws_url, other)
        waits = [asyncio.ensure_future(_close_code(ws)) for ws in sockets]
        began = time.perf_counter()
        async with (
            aiohttp.ClientSession() as http,
            http.delete(
                f"{master.http_url}/v1/keys/{record.digest}",
                headers={"Authorization": f"Bearer {_ADMIN}"},
            ) as response,
        ):
            status = response.status
        codes = await asyncio.gather(*waits)
        elapsed = time.perf_counter() - began
        survived = survivor.close_code is None
        await survivor.close()
        await client.close()
        return {
            "store": store.split(":", 1)[0],
            "edges": edges,
            "revoke_status": status,
            "closed_4401": sum(1 for c in codes if c == 4401),
            "seconds_to_last_close": round(elapsed, 4),
            "other_key_still_attached": survived,
        }
    finally:
        await master.stop()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure on memory and SQLite."""
    edges = 200 if getattr(args, "quick", False) else 1000
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            asyncio.run(_once("memory", edges)),
            asyncio.run(_once(f"sqlite:{Path(tmp) / 'rawp.db'}", edges)),
        ]
    figures = [
        figure(
            f"{r['store']}: {r['edges']} WebSockets of a revoked key closed",
            r["seconds_to_last_close"],
            "s",
            aim="all closed 4401, the other key's edge kept",
            met=r["closed_4401"] == r["edges"] and r["other_key_still_attached"],
        )
        for r in rows
    ]
    return {"when": now_iso(), "environment": environment(), "rows": rows, "figures": figures}


def markdown(result: dict[str, Any]) -> str:
    """The rows and figures as Markdown."""
    headers = ["store", "edges", "closed 4401", "s to last close", "other key kept"]
    rows = [
        [
            r["store"],
            r["edges"],
            r["closed_4401"],
            r["seconds_to_last_close"],
            r["other_key_still_attached"],
        ]
        for r in result["rows"]
    ]
    return f"# {DESCRIPTION}\n\n{table(headers, rows)}\n\n{figures_table(result['figures'])}\n"
