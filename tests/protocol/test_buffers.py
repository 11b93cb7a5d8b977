"""RING / DROP / NONE reattach buffers (RAWP §7.1.1, notes §7, §15.4)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import codec
from protocol.buffers import (
    POLICIES,
    BoundedBuffer,
    BufferedItem,
    buffer_status,
    select_backlog,
)
from protocol.frames import Policy

sizes_st = st.lists(st.integers(min_value=0, max_value=40), max_size=40)
capacity_st = st.integers(min_value=0, max_value=120)
policy_st = st.sampled_from(POLICIES)


def frames_of(sizes: list[int]) -> list[BufferedItem[int]]:
    """Frame ``i`` is ``sizes[i]`` bytes and carries ``i`` as its value."""
    return [BufferedItem(b"x" * size, index) for index, size in enumerate(sizes)]


def newest_run(sizes: list[int], capacity: int) -> list[int]:
    """Indices of the longest run of the newest frames whose sizes fit (the RING spec)."""
    kept: list[int] = []
    total = 0
    for index in range(len(sizes) - 1, -1, -1):
        if total + sizes[index] > capacity:
            break
        total += sizes[index]
        kept.insert(0, index)
    return kept


def oldest_run(sizes: list[int], capacity: int) -> list[int]:
    """Indices of the longest run of the oldest frames whose sizes fit (the DROP spec)."""
    kept: list[int] = []
    total = 0
    for index, size in enumerate(sizes):
        if total + size > capacity:
            break
        total += size
        kept.append(index)
    return kept


def expected_kept(policy: Policy, sizes: list[int], capacity: int) -> list[int]:
    """What the policy keeps of ``sizes`` (declarative, not incremental)."""
    if policy == "RING":
        return newest_run(sizes, capacity)
    if policy == "DROP":
        return oldest_run(sizes, capacity)
    return []


def expected_peak(policy: Policy, sizes: list[int], capacity: int) -> int:
    """The most bytes held after any prefix of the pushes, from the declarative spec."""
    peak = 0
    for end in range(1, len(sizes) + 1):
        held = sum(sizes[i] for i in expected_kept(policy, sizes[:end], capacity))
        peak = max(peak, held)
    return peak


@given(policy=policy_st, sizes=sizes_st, capacity=capacity_st)
def test_buffer_keeps_the_run_its_policy_names(
    policy: Policy, sizes: list[int], capacity: int
) -> None:
    """RING keeps the newest run that fits, DROP the oldest run, NONE nothing."""
    buffer: BoundedBuffer[int] = BoundedBuffer(policy, capacity)
    buffer.push_all(frames_of(sizes))
    assert [item.value for item in buffer] == expected_kept(policy, sizes, capacity)


@given(policy=policy_st, sizes=sizes_st, capacity=capacity_st)
def test_lost_frame_count_is_exact(policy: Policy, sizes: list[int], capacity: int) -> None:
    """lost_frame_count is the number of frames offered and not kept; truncated iff any."""
    buffer: BoundedBuffer[int] = BoundedBuffer(policy, capacity)
    buffer.push_all(frames_of(sizes))
    lost = len(sizes) - len(expected_kept(policy, sizes, capacity))
    assert buffer.lost_frame_count == lost
    assert buffer.truncated is (lost > 0)
    status = buffer.status()
    assert status.policy_applied == policy
    assert status.lost_frame_count == lost
    assert status.truncated is (lost > 0)


@given(policy=policy_st, sizes=sizes_st, capacity=capacity_st)
def test_high_watermark_is_the_true_peak(policy: Policy, sizes: list[int], capacity: int) -> None:
    """buffer_high_watermark equals the most bytes ever held, never above the capacity."""
    buffer: BoundedBuffer[int] = BoundedBuffer(policy, capacity)
    seen_peak = 0
    for item in frames_of(sizes):
        buffer.push(item.data, item.value)
        assert buffer.size_bytes == sum(held.size for held in buffer)
        assert buffer.size_bytes <= capacity
        seen_peak = max(seen_peak, buffer.size_bytes)
    assert buffer.high_watermark == seen_peak == expected_peak(policy, sizes, capacity)
    assert buffer.high_watermark <= capacity
    assert buffer.status().buffer_high_watermark == buffer.high_watermark


@given(sizes=sizes_st, capacity=capacity_st)
def test_none_keeps_nothing(sizes: list[int], capacity: int) -> None:
    """NONE keeps no frame, loses every one and reports a high watermark of 0."""
    buffer: BoundedBuffer[int] = BoundedBuffer("NONE", capacity)
    kept = [buffer.push(item.data, item.value) for item in frames_of(sizes)]
    assert not any(kept)
    assert len(buffer) == 0
    assert buffer.lost_frame_count == len(sizes)
    assert buffer.high_watermark == 0


@given(policy=policy_st, sizes=sizes_st, capacity=capacity_st)
def test_push_reports_whether_the_frame_was_kept(
    policy: Policy, sizes: list[int], capacity: int
) -> None:
    """push returns True exactly when the new frame is held right after the push."""
    buffer: BoundedBuffer[int] = BoundedBuffer(policy, capacity)
    for item in frames_of(sizes):
        kept = buffer.push(item.data, item.value)
        held = [held.value for held in buffer]
        assert kept is (bool(held) and held[-1] == item.value)


@given(policy=policy_st, sizes=sizes_st, capacity=capacity_st)
def test_select_backlog_matches_the_incremental_buffer(
    policy: Policy, sizes: list[int], capacity: int
) -> None:
    """select_backlog keeps the same frames and reports the same status as pushing one by one."""
    backlog = select_backlog(frames_of(sizes), policy, capacity)
    buffer: BoundedBuffer[int] = BoundedBuffer(policy, capacity)
    buffer.push_all(frames_of(sizes))
    assert backlog.items == buffer.items
    assert backlog.status == buffer.status()


@given(
    policy=policy_st,
    sizes=sizes_st,
    capacity=capacity_st,
    already_lost=st.integers(min_value=0, max_value=1000),
)
def test_already_lost_frames_add_to_the_count(
    policy: Policy, sizes: list[int], capacity: int, already_lost: int
) -> None:
    """Frames the caller reports as lost (store trim) add to lost_frame_count exactly."""
    backlog = select_backlog(frames_of(sizes), policy, capacity, already_lost=already_lost)
    lost = len(sizes) - len(expected_kept(policy, sizes, capacity)) + already_lost
    assert backlog.status.lost_frame_count == lost
    assert backlog.status.truncated is (lost > 0)


@given(policy=policy_st, sizes=sizes_st, capacity=capacity_st)
def test_unknown_loss_omits_the_count(policy: Policy, sizes: list[int], capacity: int) -> None:
    """When the loss cannot be counted (epoch changed) the status is truncated without a count."""
    backlog = select_backlog(frames_of(sizes), policy, capacity, count_unknown=True)
    assert backlog.status.truncated is True
    assert backlog.status.lost_frame_count is None
    assert b"lost_frame_count" not in codec.encode_json(backlog.status)


def test_nothing_lost_still_sends_a_zero_count() -> None:
    """A status with nothing lost sends lost_frame_count 0 and truncated false (notes §15.4)."""
    backlog = select_backlog(frames_of([3, 4]), "RING", 10)
    assert backlog.status.truncated is False
    encoded = codec.decode_object(codec.encode_json(backlog.status))
    assert encoded == {
        "policy_applied": "RING",
        "truncated": False,
        "lost_frame_count": 0,
        "buffer_high_watermark": 7,
    }


def test_ring_frame_larger_than_capacity_evicts_everything() -> None:
    """RING: a frame bigger than the capacity evicts every held frame and is lost itself."""
    buffer: BoundedBuffer[str] = BoundedBuffer("RING", 10)
    assert buffer.push(b"aaaa", "a")
    assert buffer.push(b"bbbb", "b")
    assert not buffer.push(b"c" * 11, "c")
    assert len(buffer) == 0
    assert buffer.size_bytes == 0
    assert buffer.lost_frame_count == 3
    assert buffer.high_watermark == 8
    assert buffer.push(b"dd", "d")
    assert [item.value for item in buffer] == ["d"]


def test_drop_loses_every_frame_after_the_first_that_does_not_fit() -> None:
    """DROP: once a frame does not fit, later frames are lost even when they would fit."""
    buffer: BoundedBuffer[str] = BoundedBuffer("DROP", 10)
    assert buffer.push(b"aaaaaa", "a")
    assert not buffer.push(b"bbbbbb", "b")
    assert not buffer.push(b"c", "c")
    assert [item.value for item in buffer] == ["a"]
    assert buffer.lost_frame_count == 2


def test_forced_truncation_and_added_losses() -> None:
    """add_lost counts extra lost frames; mark_truncated makes the count unknown."""
    buffer: BoundedBuffer[None] = BoundedBuffer("RING", 100)
    buffer.push(b"{}", None)
    buffer.add_lost(3)
    assert buffer.lost_frame_count == 3
    assert buffer.truncated
    buffer.mark_truncated()
    assert buffer.lost_frame_count is None
    assert buffer.status() == buffer_status("RING", lost_frame_count=None, buffer_high_watermark=2)
    assert buffer.status().truncated


def test_buffer_status_can_be_forced_truncated() -> None:
    """buffer_status(truncated=True) reports truncation even with a count of 0."""
    status = buffer_status("DROP", lost_frame_count=0, buffer_high_watermark=0, truncated=True)
    assert status.truncated is True
    assert status.lost_frame_count == 0


@given(
    policy=st.sampled_from(["RING", "DROP"]),
    sizes=st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=40),
    capacity=capacity_st,
    data=st.data(),
)
def test_discard_through_drops_what_the_master_has(
    policy: Policy, sizes: list[int], capacity: int, data: st.DataObject
) -> None:
    """discard_through drops the matching frame and everything older; RING forgives its losses."""
    buffer: BoundedBuffer[int] = BoundedBuffer(policy, capacity)
    buffer.push_all(frames_of(sizes))
    held = [item.value for item in buffer]
    lost_before = buffer.lost_frame_count
    if not held:
        assert buffer.discard_through(lambda value: True) == 0
        return
    cut = data.draw(st.sampled_from(held))
    dropped = buffer.discard_through(lambda value: value == cut)
    assert dropped == held.index(cut) + 1
    assert [item.value for item in buffer] == held[dropped:]
    assert buffer.size_bytes == sum(sizes[value] for value in held[dropped:])
    # RING lost only frames older than the match (the master has them); DROP only newer ones.
    assert buffer.lost_frame_count == (0 if policy == "RING" else lost_before)


def test_discard_through_without_a_match_changes_nothing() -> None:
    """discard_through leaves the buffer alone when no held frame matches."""
    buffer: BoundedBuffer[str] = BoundedBuffer("RING", 4)
    for name in "abcdef":
        buffer.push(b"xx", name)
    assert buffer.discard_through(lambda value: value == "a") == 0
    assert [item.value for item in buffer] == ["e", "f"]
    assert buffer.lost_frame_count == 4


def test_drain_returns_the_frames_and_resets() -> None:
    """drain hands back the held frames in order and resets counters and watermark."""
    buffer: BoundedBuffer[str] = BoundedBuffer("DROP", 4)
    for name in "abc":
        buffer.push(b"xx", name)
    assert [item.value for item in buffer.drain()] == ["a", "b"]
    assert len(buffer) == 0
    assert buffer.lost_frame_count == 0
    assert buffer.high_watermark == 0
    assert buffer.push(b"xx", "d")


@pytest.mark.parametrize(
    ("policy", "capacity", "message"),
    [("FIFO", 10, "policy must be one of"), ("RING", -1, "capacity_bytes must be >= 0")],
)
def test_bad_policy_or_capacity_is_refused(policy: str, capacity: int, message: str) -> None:
    """An unknown policy or a negative capacity raises ValueError."""
    with pytest.raises(ValueError, match=message):
        BoundedBuffer(policy, capacity)  # type: ignore[arg-type]


def test_status_applies_extra_losses_without_changing_the_buffer() -> None:
    """status(extra_lost=, unknown_loss=) reports on top of the buffer and leaves it as it was."""
    buffer: BoundedBuffer[int] = BoundedBuffer("RING", 4)
    buffer.push_all(frames_of([2, 2, 2]))
    assert buffer.kept_bytes() == [b"xx", b"xx"]
    assert buffer.status(extra_lost=5).lost_frame_count == 6
    unknown = buffer.status(unknown_loss=True)
    assert unknown.lost_frame_count is None
    assert unknown.truncated is True
    assert buffer.status() == buffer_status("RING", lost_frame_count=1, buffer_high_watermark=4)
    with pytest.raises(ValueError, match="extra_lost must be >= 0"):
        buffer.status(extra_lost=-1)
