"""The store contract for API keys and vault ids (notes §17.6): every backend alike."""

from __future__ import annotations

import uuid

from relay.store.base import Credential, SessionHeader, Store

__all__: list[str] = []


def _key(digest: str, **kw: object) -> Credential:
    return Credential(digest=digest, kind="key", workspace="ws-a", scopes=["read"], **kw)  # type: ignore[arg-type]


async def test_list_keys_lists_every_key_and_no_token(store: Store) -> None:
    """Keys (revoked ones too) are listed with their fields; tokens never are."""
    a, b, t = (uuid.uuid4().hex * 2 for _ in range(3))
    await store.put_credential(_key(a, name="one", expires_at_ms=2_000_000_000_000))
    await store.put_credential(_key(b, revoked=True))
    await store.put_credential(Credential(digest=t, kind="token", workspace="ws-a", session_id="s"))
    keys = {k.digest: k for k in await store.list_keys()}
    assert {a, b} <= set(keys)
    assert t not in keys
    assert keys[a].name == "one"
    assert keys[a].scopes == ["read"]
    assert keys[a].expires_at_ms == 2_000_000_000_000
    assert keys[b].revoked


async def test_touch_records_the_last_use_and_never_undoes_a_revocation(store: Store) -> None:
    """touch_credential sets last_used_ms; a revocation written before it stays."""
    digest = uuid.uuid4().hex * 2
    await store.put_credential(_key(digest))
    await store.touch_credential(digest, 1_700_000_000_000)
    listed = {k.digest: k for k in await store.list_keys()}[digest]
    assert listed.last_used_ms == 1_700_000_000_000
    record = await store.get_credential(digest)
    assert record is not None
    record.revoked = True
    await store.put_credential(record)
    await store.touch_credential(digest, 1_700_000_060_000)
    again = await store.get_credential(digest)
    assert again is not None
    assert again.revoked
    await store.touch_credential("0" * 64, 1)  # an unknown credential: nothing, no error


async def test_vault_ids_round_trip_through_create_get_list_and_fork(store: Store) -> None:
    """A header's vault_ids come back from get and list, and a fork given them keeps them."""
    sid = f"s-{uuid.uuid4()}"
    header = SessionHeader(
        session_id=sid,
        workspace="ws-v",
        created_at="2026-11-29T09:00:00.123Z",
        epoch=uuid.uuid4().hex,
        vault_ids=["v-1", "team:v.2"],
    )
    await store.create_session(header)
    got = await store.get_session(sid)
    assert got is not None
    assert got.vault_ids == ["v-1", "team:v.2"]
    listed = await store.list_sessions("ws-v", after=None, limit=10)
    assert [h.vault_ids for h in listed if h.session_id == sid] == [["v-1", "team:v.2"]]
    fork = SessionHeader(
        session_id=f"{sid}-f",
        workspace="ws-v",
        created_at="2026-11-29T09:00:01.000Z",
        epoch=uuid.uuid4().hex,
        parent_session_id=sid,
        vault_ids=got.vault_ids,
    )
    assert await store.fork_session(sid, fork, 0)
    forked = await store.get_session(f"{sid}-f")
    assert forked is not None
    assert forked.vault_ids == ["v-1", "team:v.2"]
