"""protocol.codec: fresh message ids and the current time."""

from __future__ import annotations

import uuid

import pytest

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


def test_a_forked_child_makes_ids_its_parent_does_not() -> None:
    """After a fork the child's ids come from fresh random bytes, not the parent's pool."""
    import os

    codec.new_message_id()  # the pool is filled
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.close(read)
        os.write(write, ",".join(codec.new_message_id() for _ in range(8)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split(","))
    os.waitpid(pid, 0)
    parent = {codec.new_message_id() for _ in range(8)}
    assert len(child) == 8
    assert not child & parent


def test_now_is_the_current_time_to_the_millisecond() -> None:
    """now() is UTC, whole milliseconds, and between the clock readings around it."""
    import datetime as dt
    import time

    before = time.time_ns() // 1_000_000
    moment = codec.now()
    after = time.time_ns() // 1_000_000
    assert moment.tzinfo is dt.UTC
    assert moment.microsecond % 1000 == 0
    assert before <= round(moment.timestamp() * 1000) <= after


def test_now_lands_on_the_clock_s_own_millisecond(monkeypatch: pytest.MonkeyPatch) -> None:
    """now() is the clock's millisecond exactly, for every millisecond of a stretch of 20 s
    (no float rounding to the one before: .999 would show as the wrong millisecond)."""
    import time

    start = 1_733_111_111_000
    for ms in range(start, start + 20_000):
        monkeypatch.setattr(time, "time_ns", lambda ms=ms: ms * 1_000_000 + 999_999)
        moment = codec.now()
        assert moment.microsecond == (ms % 1000) * 1000
        assert round(moment.timestamp() * 1000) == ms
