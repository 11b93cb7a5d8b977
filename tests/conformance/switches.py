"""Features of our master switched off in-process, one per runner feature (conformance.case).

Each switch monkeypatches our master so it lacks exactly one feature the conformance runner
knows (``conformance.case.FEATURES``), the way a third-party master might: it sends no
``session.presence``, or an HTTP route answers 404/405. The isolation tests run the whole
suite with one switch applied; the kills of the feature's own cases reuse them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from aiohttp import web

import relay.archive
import relay.http.routes
import relay.session
from protocol.frames import Frame, Presence
from relay.session import Session

__all__ = ["SWITCHES", "Switch"]

Switch = Callable[[pytest.MonkeyPatch], None]


def _no_presence(mp: pytest.MonkeyPatch) -> None:
    """The master never sends session.presence (attach, detach and expiry go unannounced)."""
    original = Session.append_master

    async def append_master(self: Session, frames: Sequence[Frame], **kwargs: Any) -> bool:
        kept = [f for f in frames if not isinstance(f, Presence)]
        if not kept:
            return True
        return await original(self, kept, **kwargs)

    mp.setattr(relay.session.Session, "append_master", append_master)


def _route_answers(mp: pytest.MonkeyPatch, name: str, error: type[web.HTTPException]) -> None:
    """The route handler ``relay.http.routes.<name>`` answers ``error`` (registered at start)."""

    async def refuse(request: web.Request) -> web.Response:
        raise error()

    mp.setattr(relay.http.routes, name, refuse)


def _no_archive(mp: pytest.MonkeyPatch) -> None:
    """Every ended session is purged, as a deletion is: nothing is archived (notes §16.1)."""
    mp.setattr(relay.archive, "ARCHIVING_REASONS", frozenset())


SWITCHES: dict[str, Switch] = {
    "presence": _no_presence,
    "rest-sessions": lambda mp: _route_answers(mp, "get_session", web.HTTPNotFound),
    "session-tokens": lambda mp: _route_answers(mp, "create_token", web.HTTPNotFound),
    "rename-over-http": lambda mp: _route_answers(mp, "rename_session", web.HTTPMethodNotAllowed),
    "archived-sessions": _no_archive,
}
"""Feature name → the switch that takes it away from our master."""
