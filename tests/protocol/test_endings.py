"""How views name a session's end (notes §17.1): expiry is "ended", with its window."""

from __future__ import annotations

import pytest

from protocol.endings import ending_notice, humanize_ms

__all__: list[str] = []


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (604_800_000, "7 days"),
        (86_400_000, "1 day"),
        (120_000, "2 minutes"),
        (90_000, "90 seconds"),
        (5_400_000, "90 minutes"),
        (1000, "1 second"),
        (300, "0.3 seconds"),
    ],
)
def test_windows_read_in_their_largest_whole_unit(ms: int, text: str) -> None:
    """A window is said in the largest unit it is a whole number of."""
    assert humanize_ms(ms) == text


def test_expiry_is_ended_with_its_window() -> None:
    """A timeout is an end the agent did not come back from, never a deletion."""
    assert ending_notice("timeout", "system", 604_800_000) == (
        "ended",
        "the agent did not come back within 7 days",
    )
    assert ending_notice("timeout", "system") == ("ended", "the agent did not come back in time")


def test_deletions_stay_deletions() -> None:
    """A user's deletion is still named a deletion, with who asked."""
    assert ending_notice("user_request", "edge") == (
        "deleted",
        "session deleted (user_request, by edge)",
    )


def test_a_frame_after_an_expiry_is_refused_as_after_an_end_not_a_deletion() -> None:
    """Sending into a session its window ended: the refusal says it has ended (no "deleted")."""
    from protocol import frames as F
    from protocol.errors import NotAllowed
    from protocol.state import check
    from protocol.view import SessionView

    from . import strategies as S

    view = SessionView(S.SESSION_ID)
    expiry = F.Deleted(
        payload=F.DeletedPayload(
            session_id=S.SESSION_ID, reason="timeout", deleted_by="system", reattach_window_ms=1000
        ),
        message_id="m-end",
        session_id=S.SESSION_ID,
        timestamp=S.deleted().timestamp,
        seq=1,
        sender=S.MASTER,
    )
    view.receive(expiry)
    with pytest.raises(NotAllowed) as refused:
        check(view.state, S.text_delta("b", "late"), "client")
    assert "has ended" in refused.value.message
    assert "deleted" not in refused.value.message


def test_the_views_notice_for_an_expiry_is_ended_with_its_window() -> None:
    """The SDK view's block for an expiry reads "ended" with the window, never "deleted";
    a user's deletion stays "deleted"."""
    from protocol import frames as F
    from protocol.view import NoticeBlock, SessionView

    from . import strategies as S

    def notice_of(reason: str, by: str, window: int | None) -> NoticeBlock:
        view = SessionView(S.SESSION_ID)
        view.receive(
            F.Deleted(
                payload=F.DeletedPayload(
                    session_id=S.SESSION_ID,
                    reason=reason,  # type: ignore[arg-type]
                    deleted_by=by,  # type: ignore[arg-type]
                    reattach_window_ms=window,
                ),
                message_id="m-end",
                session_id=S.SESSION_ID,
                timestamp=S.deleted().timestamp,
                seq=1,
                sender=S.MASTER,
            )
        )
        [notice] = [b for b in view.blocks if isinstance(b, NoticeBlock)]
        return notice

    expiry = notice_of("timeout", "system", 120_000)
    assert (expiry.notice, expiry.text) == ("ended", "the agent did not come back within 2 minutes")
    assert "delete" not in expiry.text
    deletion = notice_of("user_request", "edge", None)
    assert deletion.notice == "deleted"
