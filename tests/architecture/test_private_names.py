"""No product module uses another module's private names, but for a shrinking allow-list."""

from __future__ import annotations

from typing import Final

from tests.architecture.private_names import ROOT, Reach, find_reaches

__all__: list[str] = []

# Known reaches, each a (user, owner, name) triple; this list may only shrink. Issue 14's session
# package emptied it: cluster, recovery, restart and the hub use the session's public API.
ALLOWED: Final[frozenset[Reach]] = frozenset()


def test_no_new_reach_into_private_names() -> None:
    """A new ``from x import _y`` or ``obj._y`` across modules fails here: make it public."""
    new = sorted(find_reaches() - ALLOWED)
    assert not new, "private names used across modules:\n" + "\n".join(map(str, new))


def test_allow_list_only_shrinks() -> None:
    """An entry that no longer happens is taken off the list, so it cannot come back."""
    gone = sorted(ALLOWED - find_reaches())
    assert not gone, "fixed, take off ALLOWED:\n" + "\n".join(map(str, gone))


def test_the_checker_sees_a_reach() -> None:
    """The checker finds the kinds of reach it is meant to (a check that checks nothing passes)."""
    owner = ROOT / "relay" / "owner.py"
    user = ROOT / "relay" / "user.py"
    sources = {
        owner: "class Thing:\n    def __init__(self) -> None:\n        self._secret = 1\n",
        user: "from relay.owner import Thing\n\nprint(Thing()._secret)\n",
    }
    assert find_reaches(sources) == {Reach("relay/user.py", "relay/owner.py", "_secret")}
