"""The state machine's side of wake and revisit (notes §17.5): pending revisits and status."""

from __future__ import annotations

import datetime as dt

import pytest

from protocol.errors import DirectionError, TooManyRevisits
from protocol.finalize import fold
from protocol.state import MAX_PENDING_REVISITS, SessionState, status, status_frame_due

from . import strategies as S

LATER = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


def _client(state: SessionState, frame: object) -> None:
    fold(state, frame, "client")  # type: ignore[arg-type]


def test_a_pending_revisit_makes_an_idle_session_rescheduling() -> None:
    """A request makes status rescheduling (and a status frame due); its wake ends it."""
    state = SessionState()
    _client(state, S.revisit_request("r1", reason="check CI"))
    assert status(state) == "rescheduling"
    assert status_frame_due(state)
    assert state.pending_revisits["r1"].reason == "check CI"
    fold(state, S.wake("r1"), "master")
    assert status(state) == "idle"
    assert not state.pending_revisits


def test_running_and_requires_action_win_over_rescheduling() -> None:
    """Precedence: requires_action > running > rescheduling (notes §17.5)."""
    state = SessionState()
    _client(state, S.revisit_request("r1"))
    _client(state, S.turn_start(S.uuid4(1), 0))
    assert status(state) == "running"
    _client(state, S.interaction_request("i1"))
    assert status(state) == "requires_action"


def test_the_same_revisit_id_reschedules_and_cancel_withdraws() -> None:
    """A second request with the same id replaces the first; a cancel removes it."""
    state = SessionState()
    _client(state, S.revisit_request("r1"))
    second = S.revisit_request("r1", at=LATER)
    _client(state, second)
    assert len(state.pending_revisits) == 1
    assert state.pending_revisits["r1"].at == LATER
    assert state.pending_revisits["r1"].request_id == second.message_id
    _client(state, S.revisit_cancel("r1"))
    assert status(state) == "idle"


def test_cancel_of_an_unknown_id_is_accepted_and_changes_nothing() -> None:
    """Cancelling an id that is not pending is a no-op, not an error."""
    state = SessionState()
    _client(state, S.revisit_request("r1"))
    _client(state, S.revisit_cancel("nope"))
    assert list(state.pending_revisits) == ["r1"]


def test_the_101st_pending_revisit_is_refused() -> None:
    """At most 100 pending: a new id beyond that is too_many_revisits; rescheduling one is not."""
    state = SessionState()
    for i in range(MAX_PENDING_REVISITS):
        _client(state, S.revisit_request(f"r{i}"))
    with pytest.raises(TooManyRevisits):
        _client(state, S.revisit_request("one-more"))
    _client(state, S.revisit_request("r7", at=LATER))  # replaces: still 100
    assert len(state.pending_revisits) == MAX_PENDING_REVISITS


def test_only_a_client_requests_and_only_the_master_wakes() -> None:
    """An edge's request or cancel, and a client's wake, are refused direction."""
    state = SessionState()
    for frame, role in (
        (S.revisit_request(), "edge"),
        (S.revisit_cancel(), "edge"),
        (S.wake(), "client"),
    ):
        with pytest.raises(DirectionError):
            fold(state, frame, role)  # type: ignore[arg-type]


def test_an_ended_session_has_no_pending_revisits() -> None:
    """session.deleted drops the pending revisits: an ended session is never woken."""
    state = SessionState()
    _client(state, S.revisit_request("r1"))
    fold(state, S.deleted("master", "timeout"), "master")
    assert not state.pending_revisits
    assert status(state) == "terminated"
