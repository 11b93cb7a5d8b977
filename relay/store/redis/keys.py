"""Key names of the redis store (notes §12): what lives where, and in which cluster slot.

Every key of a session carries the hash tag ``{session_id}``, so one session lives in one
cluster slot and each per-session operation is one atomic Lua script:

==========================  =================================================================
``rawp:{S}:hdr``            hash: ``meta`` (msgpack SessionHeader), ``ws``, ``name``, ``v``
                            (the session's layout, below), ``rev``, ``head`` (last seq),
                            ``first`` (smallest seq kept), ``w:<writer>``/``r:<writer>`` (a
                            writer's last append batch number and answer), ``f:<node>``
                            (fence: that node's appends under a lease epoch up to this one
                            are refused)
``rawp:{S}:log``            stream; entry id ``<seq>-0``, field ``e`` = msgpack LogEntry, so a
                            read by seq range is one XRANGE (O(log n + k))
``rawp:{S}:ids``            hash message_id → seq (dedupe; trimmed together with the log)
``rawp:{S}:parts``          hash participant_id → msgpack ParticipantRecord
``rawp:{S}:on``             hash participant_id → node_id of every record that says attached
                            (layout 2; kept with ``parts`` by the same scripts)
``rawp:{S}:nodes``          hash node_id → how many records say attached there (layout 2)
``rawp:{S}:cli``            set of the ids of client-role records (layout 2)
``rawp:{S}:rcv``            hash participant_id → the message id ``welcome.received`` reports
``rawp:{S}:dl``             set of participant ids that may have an armed deadline
``rawp:{S}:tomb``           tombstone left by delete
``rawp:{S}:pub``            pub/sub channel: msgpack ``[node_id, [LogEntry, ...]]`` per append
``rawp:ws:<workspace>``     sorted set (score 0) of the workspace's session ids: lex paging
``rawp:{~dl}:due:2``        sorted set of every deadline, member msgpack ``[S, participant]``
``rawp:{~dl}:due``          the same, as builds before layout 2 arm them: claimed and
                            disarmed too, never armed (such a build drops a deadline it
                            claims of a session it cannot read, so it must not see ours)
``rawp:{~ar}:ended``        sorted set of archived session ids, score ended_at_ms
``rawp:{~wk}:rec``          hash ``<S>\n<wake_id>`` → JSON WakeRecord (notes §17.5); beside
                            it ``…:due`` (sorted set, score due_ms), ``…:pend`` (each
                            revisit's pending record), ``…:s:<S>`` and ``…:ws:<workspace>``
                            (a session's and a workspace's records): scripts/wakes.lua
``rawp:cred:<digest>``      msgpack Credential
``rawp:keys``               set of the digests of every stored API key (the keys' list)
``rawp:cred-used:<digest>`` when the credential last authenticated (ms), beside its record
                            so recording a use never rewrites (or un-revokes) the record
``rawp:{S}:mutex``          the session's cross-node mutex (token, PX): who its client is and
                            the finalization that follows are changed under it
``rawp:{~nodes}:live``      sorted set node_id → last heartbeat, ms on Redis's clock
``rawp:{~nodes}:all``       set of node ids that registered (and may have sessions to sweep)
``rawp:{~nodes}:held:<N>``  set of session ids node N holds connections for
``rawp:{~nodes}:writing:<N>`` hash session_id → REST writes node N has in progress there
``rawp:{~nodes}:sweep:<N>`` lease of the node sweeping dead node N (one sweeper at a time)
``rawp:{~nodes}:epoch``     hash node_id → its lease epoch (fencing token; a node that
                            registers anew, or learns it was declared dead, gets a new one)
==========================  =================================================================

Layouts (``v``): 1 kept only ``parts``, so an attach had to read and decode every record of
its session to learn who is attached where (twice: the mutex, the cross-node rules), which a
reconnect storm of N viewers paid N² times. 2 adds ``on``, ``nodes`` and ``cli``, which the
participant scripts keep in step with ``parts``, so an attach reads one record, the per-node
counts and the client records. A build that knows only layout 1 refuses a layout-2 session
("upgrade"), so it never writes a record without the index; a layout-1 session keeps
working as it was (the full read), it is never converted.

Global keys live in other slots than the session's, so the few operations that touch both
(create, delete, fork, deadlines) write the session's keys first, atomically, and the global
index after; readers tolerate an index entry whose header is gone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "ARCHIVED",
    "CLAIM_MEMO",
    "DEADLINES",
    "EARLIER_DEADLINES",
    "KEYS_INDEX",
    "NODES_ALL",
    "NODES_EPOCH",
    "NODES_HELD",
    "NODES_LIVE",
    "NODES_SWEEP",
    "NODES_WRITING",
    "WAKE_DUE",
    "WAKE_PENDING",
    "WAKE_RECORDS",
    "SessionKeys",
    "channel",
    "check_id",
    "credential_key",
    "credential_used_key",
    "mutex_key",
    "workspace_index",
]

DEADLINES: Final = "rawp:{~dl}:due:2"
EARLIER_DEADLINES: Final = "rawp:{~dl}:due"  # armed by builds before layout 2
CLAIM_MEMO: Final = "rawp:{~dl}:claim:"
ARCHIVED: Final = "rawp:{~ar}:ended"  # sorted set: archived session id, score ended_at_ms
# wakes: one slot, so every change is one script (scripts/wakes.lua)
WAKE_RECORDS: Final = "rawp:{~wk}:rec"
WAKE_DUE: Final = "rawp:{~wk}:due"
WAKE_PENDING: Final = "rawp:{~wk}:pend"
# node coordination keys share one slot, so the node scripts may touch several at once
NODES_LIVE: Final = "rawp:{~nodes}:live"
NODES_ALL: Final = "rawp:{~nodes}:all"
NODES_HELD: Final = "rawp:{~nodes}:held:"
NODES_SWEEP: Final = "rawp:{~nodes}:sweep:"
NODES_WRITING: Final = "rawp:{~nodes}:writing:"
NODES_EPOCH: Final = "rawp:{~nodes}:epoch"


def check_id(session_id: str) -> None:
    """Session ids become hash tags: braces would move the tag and split the session."""
    if not session_id or "{" in session_id or "}" in session_id:
        raise ValueError(f"invalid session id for the redis store: {session_id!r}")


@dataclass(slots=True)
class SessionKeys:
    """The keys of one session (all in its slot)."""

    hdr: str
    log: str
    ids: str
    parts: str
    tomb: str
    dl: str
    pub: str
    rcv: str
    on: str
    nodes: str
    cli: str

    def created(self) -> list[str]:
        """The keys the create and fork scripts write or clear, in their KEYS order."""
        return [self.hdr, self.log, self.ids, self.parts, self.tomb, self.rcv, *self.index()]

    def index(self) -> list[str]:
        """The attached index (layout 2): ``on``, ``nodes``, ``cli``."""
        return [self.on, self.nodes, self.cli]

    @classmethod
    def of(cls, session_id: str) -> SessionKeys:
        """The keys of ``session_id`` (ValueError for an id that cannot be a hash tag)."""
        check_id(session_id)
        p = f"rawp:{{{session_id}}}:"
        return cls(
            p + "hdr",
            p + "log",
            p + "ids",
            p + "parts",
            p + "tomb",
            p + "dl",
            p + "pub",
            p + "rcv",
            p + "on",
            p + "nodes",
            p + "cli",
        )


def channel(session_id: str) -> str:
    """The session's pub/sub channel."""
    return SessionKeys.of(session_id).pub


def mutex_key(session_id: str) -> str:
    """The session's cross-node mutex: in the session's slot, outside the delete script's keys
    (the mutex outlives a delete by at most its TTL)."""
    check_id(session_id)
    return f"rawp:{{{session_id}}}:mutex"


def workspace_index(workspace: str) -> str:
    """The sorted set of a workspace's session ids."""
    return f"rawp:ws:{workspace}"


def credential_key(digest: str) -> str:
    """Where one credential is kept."""
    return f"rawp:cred:{digest}"


def credential_used_key(digest: str) -> str:
    """When one credential was last used."""
    return f"rawp:cred-used:{digest}"


KEYS_INDEX: Final = "rawp:keys"
"""The set of every stored API key's digest."""
