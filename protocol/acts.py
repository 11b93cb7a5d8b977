"""The act table (notes §11, §16.6): who may do what to a session, by role and credential.

The state table (:mod:`protocol.state`) says which frames a session accepts *now*; this
table says whether the *credential* behind a frame or request may do the act at all. Both
the master's WebSocket path and its HTTP routes consult :func:`require` — there is no other
copy of these rules. A cell names what the credential needs::

    act                    client          edge (and HTTP callers)
    request_deletion       DELETE          DELETE          session.deleted, DELETE /v1/session
    end_with_fatal_error   ANY             DELETE          session.error {fatal: true}
    rename                 ANY             ANY             session.renamed, PATCH
    append_user_input      ·               ANY             user.message
    answer_interaction     ·               ANY             control.interaction.response
    cancel_interaction     ANY             ·               agent.interaction.cancel
    cancel_turn            ·               ANY             control.cancel, POST …/cancel
    issue_tokens           ·               KEY             POST …/tokens
    fork                   ·               KEY             POST …/fork
    continue_session       ·               KEY             POST …/continue
    export                 ·               ANY             GET …/export

``ANY``: any credential that got this far (attached in that role, or could read the session
over HTTP). ``DELETE``: an API key, or a session token with the ``delete`` grant. ``KEY``: an
API key. ``·``: the role never does the act — the frame is the state table's to refuse
(``direction``, notes §6), so :func:`require` lets it through to that rule. HTTP callers act
as edges (the routes append frames as an edge would, notes §10).

The session's client may end its session with a fatal ``session.error`` (its run is
unrecoverable), but a delete request needs a delete-capable credential from any role
(§16.6): a client attached with a ``client``-grant token cannot erase the log.
"""

from __future__ import annotations

import enum
from typing import Final, Literal, Protocol, TypeAlias

from .errors import NotAllowed

__all__ = [
    "ACTS",
    "TABLE",
    "Act",
    "Credential",
    "Need",
    "act_of",
    "allowed",
    "require",
]

Act: TypeAlias = Literal[
    "request_deletion",
    "end_with_fatal_error",
    "rename",
    "append_user_input",
    "answer_interaction",
    "cancel_interaction",
    "cancel_turn",
    "issue_tokens",
    "fork",
    "continue_session",
    "export",
]
ActorRole: TypeAlias = Literal["client", "edge"]


class Need(enum.Enum):
    """What a credential must be for one cell of the table."""

    ANY = "any credential"
    DELETE = "an API key, or a session token with the delete grant"
    KEY = "an API key"


class Credential(Protocol):
    """What the table needs to know of a credential (``relay.auth.Principal`` is one)."""

    @property
    def kind(self) -> Literal["key", "token"]:
        """``key`` (API key) or ``token`` (session token)."""

    @property
    def grants(self) -> frozenset[str]:
        """The session token's grants (``client``, ``delete``); empty for keys."""


_ANY: Final = Need.ANY
_DELETE: Final = Need.DELETE
_KEY: Final = Need.KEY

# fmt: off
TABLE: Final[dict[tuple[Act, ActorRole], Need]] = {
    ("request_deletion", "client"):     _DELETE,
    ("request_deletion", "edge"):       _DELETE,
    ("end_with_fatal_error", "client"): _ANY,
    ("end_with_fatal_error", "edge"):   _DELETE,
    ("rename", "client"):               _ANY,
    ("rename", "edge"):                 _ANY,
    ("append_user_input", "edge"):      _ANY,
    ("answer_interaction", "edge"):     _ANY,
    ("cancel_interaction", "client"):   _ANY,
    ("cancel_turn", "edge"):            _ANY,
    ("issue_tokens", "edge"):           _KEY,
    ("fork", "edge"):                   _KEY,
    ("continue_session", "edge"):       _KEY,
    ("export", "edge"):                 _ANY,
}
# fmt: on
ACTS: Final[frozenset[Act]] = frozenset(act for act, _ in TABLE)

# Frame types that are acts whatever their payload; session.error is one only when fatal.
_ACT_OF_TYPE: Final[dict[str, Act]] = {
    "session.deleted": "request_deletion",
    "session.renamed": "rename",
    "user.message": "append_user_input",
    "control.interaction.response": "answer_interaction",
    "agent.interaction.cancel": "cancel_interaction",
    "control.cancel": "cancel_turn",
}


def act_of(frame_type: str, *, fatal: bool = False) -> Act | None:
    """The act a participant's frame performs, or None (a frame that is no act here).

    ``fatal``: the frame's ``payload.fatal`` when it is a ``session.error``; a non-fatal
    error is a participant's report, which anyone attached may log (§16.8).
    """
    if frame_type == "session.error":
        return "end_with_fatal_error" if fatal else None
    return _ACT_OF_TYPE.get(frame_type)


def _meets(need: Need, credential: Credential) -> bool:
    if credential.kind == "key":
        return True
    if need is Need.DELETE:
        return "delete" in credential.grants
    return need is Need.ANY


def allowed(act: Act, role: ActorRole, credential: Credential) -> bool:
    """May ``credential``, acting as ``role``, do ``act``? (No cell: the state table's.)"""
    need = TABLE.get((act, role))
    return need is None or _meets(need, credential)


def require(act: Act, role: ActorRole, credential: Credential) -> None:
    """Raise :class:`NotAllowed` (``not_allowed``, non-fatal) unless :func:`allowed`."""
    if not allowed(act, role, credential):
        need = TABLE[act, role]
        raise NotAllowed(f"{act.replace('_', ' ')} as {role} needs {need.value}")
