"""The act table (protocol/acts.py): its cells, its frame mapping, its refusals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from protocol import acts
from protocol.errors import NotAllowed


@dataclass(frozen=True)
class Cred:
    """A credential as the table sees it."""

    kind: Literal["key", "token"]
    grants: frozenset[str] = field(default_factory=frozenset)
    scopes: frozenset[str] = acts.SCOPES


KEY = Cred("key")
TOKEN = Cred("token")
TOKEN_CLIENT = Cred("token", frozenset({"client"}))
TOKEN_DELETE = Cred("token", frozenset({"delete"}))

# What notes §11 and §16.6 say, cell by cell: (act, role) -> who of key/token/+client/+delete.
EXPECTED: dict[tuple[str, str], tuple[bool, bool, bool, bool]] = {
    ("attach", "client"): (True, False, True, False),
    ("attach", "edge"): (True, True, True, True),
    ("create_session", "client"): (True, False, False, False),
    ("create_session", "edge"): (True, False, False, False),
    ("read_session", "edge"): (True, True, True, True),
    ("list_sessions", "edge"): (True, False, False, False),
    ("manage_keys", "edge"): (True, False, False, False),
    ("request_deletion", "client"): (True, False, False, True),
    ("request_deletion", "edge"): (True, False, False, True),
    ("end_with_fatal_error", "client"): (True, True, True, True),
    ("end_with_fatal_error", "edge"): (True, False, False, True),
    ("rename", "client"): (True, True, True, True),
    ("rename", "edge"): (True, True, True, True),
    ("append_user_input", "edge"): (True, True, True, True),
    ("answer_interaction", "edge"): (True, True, True, True),
    ("cancel_interaction", "client"): (True, True, True, True),
    ("cancel_turn", "edge"): (True, True, True, True),
    ("issue_tokens", "edge"): (True, False, False, False),
    ("fork", "edge"): (True, False, False, False),
    ("continue_session", "edge"): (True, False, False, False),
    ("export", "edge"): (True, True, True, True),
}


def test_the_table_has_exactly_the_decided_cells() -> None:
    """Every cell of the table is one the notes decided, and every decided cell is there."""
    assert set(acts.TABLE) == set(EXPECTED)


@pytest.mark.parametrize(("act", "role"), sorted(EXPECTED))
def test_each_cell_allows_exactly_the_decided_credentials(act: str, role: str) -> None:
    """allowed() answers each credential of a cell as notes §11 / §16.6 decide."""
    got = tuple(
        acts.allowed(act, role, cred)  # type: ignore[arg-type]
        for cred in (KEY, TOKEN, TOKEN_CLIENT, TOKEN_DELETE)
    )
    assert got == EXPECTED[act, role]


# The scope each cell needs (notes §17.6, §17.12).
SCOPE_OF: dict[tuple[str, str], str] = {
    ("attach", "client"): "write",
    ("attach", "edge"): "read",
    ("create_session", "client"): "write",
    ("create_session", "edge"): "write",
    ("read_session", "edge"): "read",
    ("list_sessions", "edge"): "read",
    ("manage_keys", "edge"): "admin",
    ("request_deletion", "client"): "delete",
    ("request_deletion", "edge"): "delete",
    ("end_with_fatal_error", "client"): "write",
    ("end_with_fatal_error", "edge"): "delete",
    ("rename", "client"): "write",
    ("rename", "edge"): "write",
    ("append_user_input", "edge"): "write",
    ("answer_interaction", "edge"): "write",
    ("cancel_interaction", "client"): "write",
    ("cancel_turn", "edge"): "write",
    ("issue_tokens", "edge"): "tokens",
    ("fork", "edge"): "write",
    ("continue_session", "edge"): "write",
    ("export", "edge"): "read",
}


@pytest.mark.parametrize(("act", "role"), sorted(SCOPE_OF))
@pytest.mark.parametrize("scope", sorted(acts.SCOPES))
def test_a_key_with_one_scope_does_exactly_the_acts_of_that_scope(
    act: str, role: str, scope: str
) -> None:
    """A key carrying only ``scope`` is allowed a cell iff the cell needs that scope."""
    key = Cred("key", scopes=frozenset({scope}))
    assert acts.allowed(act, role, key) == (SCOPE_OF[act, role] == scope)  # type: ignore[arg-type]


def test_every_cell_has_its_decided_scope() -> None:
    """The scope column is the decided one, cell by cell."""
    assert {cell: rule.scope for cell, rule in acts.TABLE.items()} == SCOPE_OF


def test_a_token_is_refused_what_its_key_lacked() -> None:
    """A token with the delete grant but without the delete scope cannot delete."""
    token = Cred("token", frozenset({"delete"}), frozenset({"read", "write"}))
    with pytest.raises(NotAllowed) as info:
        acts.require("request_deletion", "edge", token)
    assert "delete scope" in info.value.message


def test_a_role_without_a_cell_is_left_to_the_state_table() -> None:
    """A role that never does an act (an edge's cancel_interaction) is not refused here."""
    assert acts.allowed("cancel_interaction", "edge", TOKEN)
    acts.require("append_user_input", "client", TOKEN)  # direction is the state table's


def test_require_raises_non_fatal_not_allowed_naming_the_need() -> None:
    """require() refuses with not_allowed, non-fatal, saying what the credential lacks."""
    with pytest.raises(NotAllowed) as info:
        acts.require("end_with_fatal_error", "edge", TOKEN)
    assert info.value.code == "not_allowed"
    assert not info.value.fatal
    assert "delete grant" in info.value.message


@pytest.mark.parametrize(
    ("frame_type", "fatal", "act"),
    [
        ("session.deleted", False, "request_deletion"),
        ("session.error", True, "end_with_fatal_error"),
        ("session.error", False, None),
        ("session.renamed", False, "rename"),
        ("user.message", False, "append_user_input"),
        ("control.interaction.response", False, "answer_interaction"),
        ("agent.interaction.cancel", False, "cancel_interaction"),
        ("control.cancel", False, "cancel_turn"),
        ("agent.text.delta", False, None),
        ("x.custom", False, None),
    ],
)
def test_act_of_maps_frames_to_acts(frame_type: str, fatal: bool, act: str | None) -> None:
    """A frame's act follows its type; a session.error is an act only when fatal."""
    assert acts.act_of(frame_type, fatal=fatal) == act
