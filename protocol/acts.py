"""The act table (notes §11, §16.6): who may do what to a session, by role and credential.

The state table (:mod:`protocol.state`) says which frames a session accepts *now*; this
table says whether the *credential* behind a frame or request may do the act at all. Both
the master's WebSocket path and its HTTP routes consult :func:`require` — there is no other
copy of these rules. A cell names what the credential needs::

    act                   scope   client     edge (and HTTP)  frames, routes
    attach                *       CLIENT     ANY              hello; SSE, AG-UI streams
    create_session        write   KEY        KEY              hello create, POST /v1/sessions
    read_session          read    ·          ANY              GET …, …/events, SSE, AG-UI
    list_sessions         read    ·          KEY              GET /v1/sessions
    manage_keys           admin   ·          KEY              /v1/keys
    request_deletion      delete  DELETE     DELETE           session.deleted, DELETE
    end_with_fatal_error  *       ANY        DELETE           session.error {fatal: true}
    rename                write   ANY        ANY              session.renamed, PATCH
    append_user_input     write   ·          ANY              user.message, POST …/events
    answer_interaction    write   ·          ANY              control.interaction.response
    cancel_interaction    write   ANY        ·                agent.interaction.cancel
    cancel_turn           write   ·          ANY              control.cancel, POST …/cancel
    issue_tokens          tokens  ·          KEY              POST …/tokens
    fork                  write   ·          KEY              POST …/fork
    continue_session      write   ·          KEY              POST …/continue
    export                read    ·          ANY              GET …/export

``*``: attaching as client needs ``write``, as edge ``read``; a client's fatal error needs
``write``, an edge's ``delete``.

Each cell names a **scope** the credential must carry (an API key's scopes, notes §17.6:
``read``, ``write``, ``delete``, ``tokens``, ``admin``; a session token carries those of the key
that issued it, never ``tokens`` or ``admin``) and what **kind** of credential it must be.
``ANY``: any credential that got this far (attached in that role, or could read the session
over HTTP). ``DELETE``: an API key, or a session token with the ``delete`` grant. ``CLIENT``:
an API key, or a session token with the ``client`` grant. ``KEY``: an API key. ``·``: the role
never does the act — the frame is the state table's to refuse (``direction``, notes §6), so
:func:`require` lets it through to that rule. HTTP callers act as edges (the routes append
frames as an edge would, notes §10).

The session's client may end its session with a fatal ``session.error`` (its run is
unrecoverable), but a delete request needs a delete-capable credential from any role
(§16.6): a client attached with a ``client``-grant token cannot erase the log.
"""

from __future__ import annotations

import enum
from typing import Final, Literal, NamedTuple, Protocol, TypeAlias

from .errors import NotAllowed

__all__ = [
    "ACTS",
    "SCOPES",
    "TABLE",
    "TOKEN_SCOPES",
    "Act",
    "Cell",
    "Credential",
    "Need",
    "Scope",
    "act_of",
    "allowed",
    "require",
]

Act: TypeAlias = Literal[
    "attach",
    "create_session",
    "read_session",
    "list_sessions",
    "manage_keys",
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
Scope: TypeAlias = Literal["read", "write", "delete", "tokens", "admin"]

SCOPES: Final[frozenset[str]] = frozenset({"read", "write", "delete", "tokens", "admin"})
"""Every scope an API key may carry (notes §17.6); a key given by ``--api-key`` has them all."""
TOKEN_SCOPES: Final[frozenset[str]] = frozenset({"read", "write", "delete"})
"""The scopes a session token may carry (those of its key, within these)."""


class Need(enum.Enum):
    """What a credential must be for one cell of the table."""

    ANY = "any credential"
    DELETE = "an API key, or a session token with the delete grant"
    CLIENT = "an API key, or a session token with the client grant"
    KEY = "an API key"


class Cell(NamedTuple):
    """One cell: the scope the credential must carry, and the kind it must be."""

    scope: Scope
    need: Need


class Credential(Protocol):
    """What the table needs to know of a credential (``relay.auth.Principal`` is one)."""

    @property
    def kind(self) -> Literal["key", "token"]:
        """``key`` (API key) or ``token`` (session token)."""

    @property
    def grants(self) -> frozenset[str]:
        """The session token's grants (``client``, ``delete``); empty for keys."""

    @property
    def scopes(self) -> frozenset[str]:
        """The scopes it carries (:data:`SCOPES`; a token's are its key's, within
        :data:`TOKEN_SCOPES`)."""


_ANY: Final = Need.ANY
_DELETE: Final = Need.DELETE
_CLIENT: Final = Need.CLIENT
_KEY: Final = Need.KEY

# fmt: off
TABLE: Final[dict[tuple[Act, ActorRole], Cell]] = {
    ("attach", "client"):               Cell("write", _CLIENT),
    ("attach", "edge"):                 Cell("read", _ANY),
    ("create_session", "client"):       Cell("write", _KEY),
    ("create_session", "edge"):         Cell("write", _KEY),
    ("read_session", "edge"):           Cell("read", _ANY),
    ("list_sessions", "edge"):          Cell("read", _KEY),
    ("manage_keys", "edge"):            Cell("admin", _KEY),
    ("request_deletion", "client"):     Cell("delete", _DELETE),
    ("request_deletion", "edge"):       Cell("delete", _DELETE),
    ("end_with_fatal_error", "client"): Cell("write", _ANY),
    ("end_with_fatal_error", "edge"):   Cell("delete", _DELETE),
    ("rename", "client"):               Cell("write", _ANY),
    ("rename", "edge"):                 Cell("write", _ANY),
    ("append_user_input", "edge"):      Cell("write", _ANY),
    ("answer_interaction", "edge"):     Cell("write", _ANY),
    ("cancel_interaction", "client"):   Cell("write", _ANY),
    ("cancel_turn", "edge"):            Cell("write", _ANY),
    ("issue_tokens", "edge"):           Cell("tokens", _KEY),
    ("fork", "edge"):                   Cell("write", _KEY),
    ("continue_session", "edge"):       Cell("write", _KEY),
    ("export", "edge"):                 Cell("read", _ANY),
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


def _meets(cell: Cell, credential: Credential) -> bool:
    if cell.scope not in credential.scopes:
        return False
    if credential.kind == "key":
        return True
    if cell.need is Need.DELETE:
        return "delete" in credential.grants
    if cell.need is Need.CLIENT:
        return "client" in credential.grants
    return cell.need is Need.ANY


def allowed(act: Act, role: ActorRole, credential: Credential) -> bool:
    """May ``credential``, acting as ``role``, do ``act``? (No cell: the state table's.)"""
    cell = TABLE.get((act, role))
    return cell is None or _meets(cell, credential)


def require(act: Act, role: ActorRole, credential: Credential) -> None:
    """Raise :class:`NotAllowed` (``not_allowed``, non-fatal) unless :func:`allowed`."""
    if not allowed(act, role, credential):
        cell = TABLE[act, role]
        what = f"{act.replace('_', ' ')} as {role}"
        if cell.scope not in credential.scopes:
            raise NotAllowed(f"{what} needs the {cell.scope} scope, which this credential lacks")
        raise NotAllowed(f"{what} needs {cell.need.value}")
