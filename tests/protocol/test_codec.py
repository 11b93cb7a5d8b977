"""protocol.codec: fresh message ids."""

from __future__ import annotations

import uuid

from protocol import codec


def test_new_message_ids_are_distinct_version_4_uuids() -> None:
    """new_message_id gives the canonical text of a random (version 4, RFC 4122) UUID."""
    ids = [codec.new_message_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == text
    # every one of the 122 random bits varies across the ids (none stuck at 0 or 1)
    values = [uuid.UUID(t).int for t in ids]
    fixed = (0xF000 << 64) | (0xC000 << 48)
    ored, anded = 0, ~0
    for v in values:
        ored |= v
        anded &= v
    assert (ored | fixed) == (1 << 128) - 1
    assert anded & ~fixed & ((1 << 128) - 1) == 0
