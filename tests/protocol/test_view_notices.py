"""protocol/view.py honours notices only from the master (notes §16.8)."""

from __future__ import annotations

import json

import pytest

from protocol import codec
from protocol.state import SenderRole
from protocol.view import NoticeBlock, SessionView
from relay.http.transcript import incomplete
from tests.support.wire import envelope


def _notice_of(role: SenderRole) -> NoticeBlock:
    frame = envelope(
        "s-n",
        "session.error",
        {"error_code": "history_truncated", "message": "lost", "fatal": False},
        seq=1,
        sender={"role": role, "participant_id": f"p-{role}"},
    )
    view = SessionView.replay("s-n", [(codec.decode(json.dumps(frame)), role)])
    [block] = view.blocks
    assert isinstance(block, NoticeBlock)
    return block


@pytest.mark.parametrize("role", ["client", "edge"])
def test_a_participants_history_truncated_is_its_report(role: SenderRole) -> None:
    """A participant's history_truncated is shown as its report and says nothing is lost."""
    block = _notice_of(role)
    assert block.reported_by == role
    assert not block.data_incomplete
    assert incomplete([block]) == []


def test_the_masters_history_truncated_marks_the_data_incomplete() -> None:
    """The master's history_truncated is the session's notice: the data is incomplete."""
    block = _notice_of("master")
    assert block.reported_by == "master"
    assert block.data_incomplete
    assert incomplete([block]) == ["lost"]
