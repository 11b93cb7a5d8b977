"""The durable store: Redis (or Redis Cluster), shared by every master node (notes §12).

One module per job, each importing only those below it:

==================  ========================================================================
``store.py``        :class:`RedisStore`: sessions, log reads, participants, deadlines,
                    credentials; the facade relay/cluster/ and the hub use
``appender.py``     the append queue: group commit, the writer's batch numbers, exactly-once
                    retries, the fencing answer
``coordination.py`` node heartbeats, sweeps and lease epochs, held sets, the session mutex
``lease.py``        this node's lease epoch as its writes carry it (pinned for REST), the
                    fencing answer, REST write holds
``pubsub.py``       :class:`Subscription`: following the batches every node appends
``pool.py``         the connections to one Redis: a pool that waits when all are busy
``lua.py``          the Lua scripts (``scripts/*.lua``), read once at import
``framing.py``      msgpack: what the scripts are sent, what Redis hands back
``errors.py``       redis-py's failures as the store's errors
``keys.py``         the key layout (the data model table)
==================  ========================================================================
"""

from __future__ import annotations

from .errors import NodeFencedError
from .framing import AttachView
from .lua import APPEND_LUA, FENCE_LUA, NODE_CLAIM_LUA
from .pubsub import Published, Subscription
from .store import Entered, RedisStore

__all__ = [
    "APPEND_LUA",
    "FENCE_LUA",
    "NODE_CLAIM_LUA",
    "AttachView",
    "Entered",
    "NodeFencedError",
    "Published",
    "RedisStore",
    "Subscription",
]
