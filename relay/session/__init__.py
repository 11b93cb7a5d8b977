"""One session on this node: validate → append → fold → fan out, attach, detach, terminate.

The public API is :class:`Session` (made with the :class:`SessionDeps` it is handed),
:class:`Participant` (one attached connection), :func:`rebuild_state` (or, of a log decoded
once with :func:`decode_log`, :func:`state_of`), :func:`presence_change`, and for the
recoveries :func:`logged_roster` and :func:`deadline_again`, and for a coordinator reading
an attach's first backlog page ahead :func:`backlog_read_after` and :data:`BACKLOG_FIRST_READ`
(where and how much of the log it reads first), and :func:`same_frame` (is a frame the one
logged under its id, or another one?); the modules of
this package are its parts (docs/architecture.md).
"""

from __future__ import annotations

from .attach import BACKLOG_FIRST_READ, backlog_read_after
from .builders import presence_change
from .core import SessionDeps
from .participant import Participant
from .pipeline import Decoded, decode_log, rebuild_state, same_frame, state_of
from .roster import deadline_again, logged_roster
from .runs import RUN_WAIT_S
from .session import Session

__all__ = [
    "BACKLOG_FIRST_READ",
    "RUN_WAIT_S",
    "Decoded",
    "Participant",
    "Session",
    "SessionDeps",
    "backlog_read_after",
    "deadline_again",
    "decode_log",
    "logged_roster",
    "presence_change",
    "rebuild_state",
    "same_frame",
    "state_of",
]
