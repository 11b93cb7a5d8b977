"""Presence in a stored log, and a store that refuses one presence frame, for fault tests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

from protocol.errors import StoreUnavailableError
from relay.store.base import AppendResult, LogEntry, NewEntry, Store

__all__ = ["refuse_next_presence", "roster_of"]


def roster_of(entries: Sequence[LogEntry]) -> dict[str, str]:
    """Who is attached by the log alone: its presence frames folded from seq 1 (each
    participant's last change, coalesced frames included)."""
    roster: dict[str, str] = {}
    for entry in entries:
        if entry.type != "session.presence":
            continue
        payload = json.loads(entry.data)["payload"]
        for change in payload.get("changes") or [payload]:
            roster[change["participant_id"]] = change["state"]
    return roster


def refuse_next_presence(
    monkeypatch: pytest.MonkeyPatch, store: Store, *, times: int | None = 1
) -> list[str]:
    """``store`` (any kind) refuses the next ``times`` appends that carry a presence frame
    (None: every one), as an outage would; the returned list gets each refused frame's
    state."""
    real = store.append_nowait
    refused: list[str] = []

    def flaky(
        session_id: str, entries: Sequence[NewEntry], **options: Any
    ) -> asyncio.Future[list[AppendResult]]:
        presence = [e for e in entries if e.type == "session.presence"]
        if presence and (times is None or len(refused) < times):
            refused.append(json.loads(presence[0].committed(1).data)["payload"]["state"])
            failed: asyncio.Future[list[AppendResult]] = asyncio.get_running_loop().create_future()
            failed.set_exception(StoreUnavailableError("the store is down for this test"))
            return failed
        return real(session_id, entries, **options)

    monkeypatch.setattr(store, "append_nowait", flaky)
    return refused
