"""ACP ⇄ RAWP, sans I/O (notes §17.11): an ACP agent's updates as RAWP frames, and a session's
frames as what an ACP editor is sent. docs/acp.md has the table both ways.

* :class:`AcpIngest` (``rawp bridge acp``): one ACP agent's ``session/update``\\ s,
  ``session/request_permission``\\ s and prompt answers → :class:`AcpOp` s, the frames of the
  session's RAWP client.
* :class:`AcpEgress` (``rawp acp attach``): the frames an edge is delivered → ``session/update``
  notifications, permission questions and the turn markers a ``session/prompt`` waits for.

ACP's models come from the official ``agent-client-protocol`` package (``acp.schema``).
"""

from .egress import AcpEgress, Ask, Out
from .ingest import (
    MAX_DELTA_CHARS,
    MAX_OBJECT_BYTES,
    MAX_OPTION_NAME_CHARS,
    MAX_PERMISSION_OPTIONS,
    AcpIngest,
    AcpOp,
    SessionUpdate,
    answer_outcome,
    dump,
    permission_options,
    permission_problem,
)

__all__ = [
    "MAX_DELTA_CHARS",
    "MAX_OBJECT_BYTES",
    "MAX_OPTION_NAME_CHARS",
    "MAX_PERMISSION_OPTIONS",
    "AcpEgress",
    "AcpIngest",
    "AcpOp",
    "Ask",
    "Out",
    "SessionUpdate",
    "answer_outcome",
    "dump",
    "permission_options",
    "permission_problem",
]
