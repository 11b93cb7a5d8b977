"""One session on this node: validate → append → fold → fan out, attach, detach, terminate.

The public API is :class:`Session` (made with the :class:`SessionDeps` it is handed),
:class:`Participant` (one attached connection), :func:`rebuild_state` (or, of a log decoded
once with :func:`decode_log`, :func:`state_of`), :func:`presence_change`, and for the
recoveries :func:`logged_roster` and :func:`deadline_again`; the modules of
this package are its parts (docs/architecture.md).
"""

from __future__ import annotations

from .builders import presence_change
from .core import SessionDeps
from .participant import Participant
from .pipeline import Decoded, decode_log, rebuild_state, state_of
from .roster import deadline_again, logged_roster
from .session import Session

__all__ = [
    "Decoded",
    "Participant",
    "Session",
    "SessionDeps",
    "deadline_again",
    "decode_log",
    "logged_roster",
    "presence_change",
    "rebuild_state",
    "state_of",
]
