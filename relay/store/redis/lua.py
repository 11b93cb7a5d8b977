"""The store's Lua scripts: ``scripts/<name>.lua``, read once at import, registered per client.

Each file opens with a header comment saying what the script does, its KEYS, its ARGV and
what it returns. A script runs atomically on the Redis (cluster node) of its keys' slot;
redis-py sends it by SHA and loads it again after a Redis restart (``NOSCRIPT``).
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any, Final

__all__ = [
    "APPEND_LUA",
    "ARCHIVE_LUA",
    "ATTACH_VIEW_LUA",
    "CLAIM_LUA",
    "CREATE_LUA",
    "DELETE_LUA",
    "DISARM_LUA",
    "EXTEND_LUA",
    "FENCE_LUA",
    "FORK_LUA",
    "NODE_AGES_LUA",
    "NODE_CLAIM_LUA",
    "NODE_HEARTBEAT_LUA",
    "NODE_SWEPT_LUA",
    "PUT_PARTICIPANT_LUA",
    "REMOVE_PARTICIPANT_LUA",
    "RENAME_LUA",
    "SOURCES",
    "UNLOCK_LUA",
    "WAKES_LUA",
    "WRITE_DONE_LUA",
    "WRITE_HOLD_LUA",
    "Scripts",
]


def _load(name: str) -> str:
    return files(__package__).joinpath("scripts", f"{name}.lua").read_text(encoding="utf-8")


# file stem -> source: every script the store runs (a test checks each file is here)
SOURCES: Final[dict[str, str]] = {
    name: _load(name)
    for name in (
        "append",
        "archive",
        "attach_view",
        "claim_deadlines",
        "create",
        "delete",
        "disarm",
        "extend",
        "fence",
        "fork",
        "node_ages",
        "node_claim",
        "node_heartbeat",
        "node_swept",
        "put_participant",
        "remove_participant",
        "rename",
        "unlock",
        "wakes",
        "write_done",
        "write_hold",
    )
}

APPEND_LUA: Final = SOURCES["append"]
ARCHIVE_LUA: Final = SOURCES["archive"]
ATTACH_VIEW_LUA: Final = SOURCES["attach_view"]
CLAIM_LUA: Final = SOURCES["claim_deadlines"]
CREATE_LUA: Final = SOURCES["create"]
DELETE_LUA: Final = SOURCES["delete"]
DISARM_LUA: Final = SOURCES["disarm"]
EXTEND_LUA: Final = SOURCES["extend"]
FENCE_LUA: Final = SOURCES["fence"]
FORK_LUA: Final = SOURCES["fork"]
NODE_AGES_LUA: Final = SOURCES["node_ages"]
NODE_CLAIM_LUA: Final = SOURCES["node_claim"]
NODE_HEARTBEAT_LUA: Final = SOURCES["node_heartbeat"]
NODE_SWEPT_LUA: Final = SOURCES["node_swept"]
PUT_PARTICIPANT_LUA: Final = SOURCES["put_participant"]
REMOVE_PARTICIPANT_LUA: Final = SOURCES["remove_participant"]
RENAME_LUA: Final = SOURCES["rename"]
UNLOCK_LUA: Final = SOURCES["unlock"]
WAKES_LUA: Final = SOURCES["wakes"]
WRITE_DONE_LUA: Final = SOURCES["write_done"]
WRITE_HOLD_LUA: Final = SOURCES["write_hold"]


class Scripts:
    """Every script registered on one client (redis-py ``AsyncScript`` objects, by file stem)."""

    def __init__(self, client: Any) -> None:
        register = client.register_script
        self.append: Any = register(APPEND_LUA)
        self.archive: Any = register(ARCHIVE_LUA)
        self.attach_view: Any = register(ATTACH_VIEW_LUA)
        self.claim_deadlines: Any = register(CLAIM_LUA)
        self.create: Any = register(CREATE_LUA)
        self.delete: Any = register(DELETE_LUA)
        self.disarm: Any = register(DISARM_LUA)
        self.extend: Any = register(EXTEND_LUA)
        self.fence: Any = register(FENCE_LUA)
        self.fork: Any = register(FORK_LUA)
        self.node_ages: Any = register(NODE_AGES_LUA)
        self.node_claim: Any = register(NODE_CLAIM_LUA)
        self.node_heartbeat: Any = register(NODE_HEARTBEAT_LUA)
        self.node_swept: Any = register(NODE_SWEPT_LUA)
        self.put_participant: Any = register(PUT_PARTICIPANT_LUA)
        self.remove_participant: Any = register(REMOVE_PARTICIPANT_LUA)
        self.rename: Any = register(RENAME_LUA)
        self.unlock: Any = register(UNLOCK_LUA)
        self.wakes: Any = register(WAKES_LUA)
        self.write_done: Any = register(WRITE_DONE_LUA)
        self.write_hold: Any = register(WRITE_HOLD_LUA)
