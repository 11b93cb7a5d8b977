"""protocol/resends.py: which frames to write again after store_unavailable, and when."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.reconnect import Backoff
from protocol.resends import Resends

__all__: list[str] = []

_windows = st.lists(
    st.text("abcdefgh", min_size=1, max_size=4), min_size=1, max_size=30, unique=True
)


@given(data=st.data(), window=_windows)
def test_a_round_resends_the_window_from_the_first_refused_frame_once_each(
    data: st.DataObject, window: list[str]
) -> None:
    """Whatever refusals arrive (the first refused frame and any later ones, any order, any
    repeats), the round writes the window from the first refused frame on, once each, in order."""
    first = data.draw(st.integers(0, len(window) - 1))
    later = data.draw(st.lists(st.sampled_from(window[first:]), max_size=20))
    named = data.draw(st.permutations([window[first], *later]))
    resends = Resends(Backoff())
    for message_id in named:
        assert resends.refused(message_id, window, [])
    assert resends.due
    assert resends.take(window) == window[first:]
    assert not resends.due
    assert resends.take(window) == []  # nothing refused since: an empty round
    assert resends.resent == len(window) - first


@given(window=_windows, data=st.data())
def test_the_frame_to_go_back_to_leaving_the_window_resends_the_whole_window(
    window: list[str], data: st.DataObject
) -> None:
    """Acknowledged (or shed) meanwhile: the round starts at the window's first frame."""
    resends = Resends(Backoff())
    assert resends.refused("gone", ["gone", *window], [])
    assert resends.take(window) == window
    later = data.draw(st.sampled_from(window))
    assert resends.refused(later, window, [])
    assert resends.take(window) == window[window.index(later) :]


def test_a_refusal_of_something_not_ours_to_resend_is_left_to_the_caller() -> None:
    """A frame outside the window (already settled, or never sent live) is not re-sent."""
    resends = Resends(Backoff())
    assert not resends.refused("x", ["a", "b"], [])
    assert not resends.due


def test_a_refused_history_gives_up_the_connection() -> None:
    """A history cannot be re-sent live: the client reattaches (the next history carries it)."""
    resends = Resends(Backoff())
    assert resends.refused("h", ["a"], ["h"])
    assert resends.due
    assert resends.take(["a"]) is None
    resends.new_connection()
    assert not resends.due


def test_too_many_rounds_without_an_acknowledgement_give_up_the_connection() -> None:
    """After max_rounds rounds in a row the client reattaches; an ack restarts the count."""
    resends = Resends(Backoff(), max_rounds=2)
    for _ in range(2):
        resends.refused("a", ["a"], [])
        assert resends.take(["a"]) == ["a"]
    resends.refused("a", ["a"], [])
    assert resends.take(["a"]) is None
    resends.new_connection()
    resends.acknowledged()
    resends.refused("a", ["a"], [])
    assert resends.take(["a"]) == ["a"]


@given(rounds=st.integers(0, 12), seed=st.integers(0, 2**32))
def test_rounds_back_off_exponentially_with_full_jitter(rounds: int, seed: int) -> None:
    """The wait before round n is within the backoff's ceiling for attempt n."""
    backoff = Backoff(initial=0.1, maximum=5.0)
    resends = Resends(backoff, max_rounds=None)
    for _ in range(rounds):
        resends.refused("a", ["a"], [])
        resends.take(["a"])
    assert 0 <= resends.delay(random.Random(seed)) <= backoff.ceiling(rounds)


def test_zero_rounds_disables_resending() -> None:
    """max_rounds=0: the library re-sends nothing (refusals reach the caller)."""
    assert not Resends(Backoff(), max_rounds=0).enabled
    with pytest.raises(ValueError, match="max_rounds"):
        Resends(Backoff(), max_rounds=-1)
