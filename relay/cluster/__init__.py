"""Several master nodes on one Redis: follow sessions, fence takeovers, watch node liveness.

With any other store a master is one node, and its sessions are handed
:class:`relay.coordination.SoleNode`, whose every hook is a no-op. With the Redis store they
are handed a :class:`ClusterNode`, which makes the nodes behave as one master (notes §12,
docs/operations.md). Its parts, one job each:

* **Following** (:mod:`.following`): every node that has a session loaded hears its
  committed batches, applies other nodes' entries in seq order, fills gaps from the log,
  and refolds a *stale* session (one whose store write failed) before it judges anything.
* **The session mutex** (:mod:`.mutex`): attach, detach, expiry, delete and crash recovery
  run under the session's cross-node mutex, each holder caught up with the log first, so
  finalization happens exactly once however many nodes notice the loss.
* **Takeover** (:mod:`.takeover`): one client per session across nodes (4409); a takeover
  fences the old node's connection through the session's channel.
* **Liveness** (:mod:`.liveness`): heartbeats, sweeps of dead nodes (crash recovery,
  relay/recovery.py), a node's own previous incarnation, and closing our connections when
  we find we were declared dead.

The cluster sits above the session and below the hub: it uses only the session's public API
and what :class:`ClusterHost` says of its owner.
"""

from __future__ import annotations

from .node import ClusterNode, node_for
from .shared import ClusterHost, cancel_and_wait

__all__ = ["ClusterHost", "ClusterNode", "cancel_and_wait", "node_for"]
