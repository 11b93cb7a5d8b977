"""ClientCore's §7 re-send decisions, sans I/O: refusals kept back, the round, the waiting."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import codec
from protocol import frames as F
from protocol.client_core import DEFAULT_BUFFER, ClientCore

__all__: list[str] = []


class _Future:
    """A settleable outcome (what the I/O adapter's asyncio futures are to the ledger)."""

    def __init__(self) -> None:
        self.outcome: Any = None
        self.settled = False

    def done(self) -> bool:
        return self.settled

    def set_result(self, result: int, /) -> None:
        self.outcome, self.settled = result, True

    def set_exception(self, exception: BaseException, /) -> None:
        self.outcome, self.settled = exception, True


def _core(rounds: int | None = 6) -> ClientCore[_Future]:
    return ClientCore(
        "ws://127.0.0.1:1/v1/ws",
        "s-core",
        role="client",
        buffer_request=DEFAULT_BUFFER,
        in_flight_bytes=None,
        participant_id="p-1",
        view=None,
        state_path=None,
        new_future=_Future,
        resend_rounds=rounds,
    )


def _delta(core: ClientCore[_Future], n: int) -> F.TextDelta:
    payload = F.TextDeltaPayload(block_id="b", delta=f"{n} ")
    return F.TextDelta(payload=payload, **core.envelope())


def _send_live(core: ClientCore[_Future], frame: F.TextDelta) -> bytes:
    """What RawpClient.post does on a live socket."""
    data = core._encode_outgoing(frame)
    core._commits.track(frame.message_id)
    core._commits.wrote(frame.message_id, [frame.message_id])
    core._sent_live(data, frame)
    return data


def _master(core: ClientCore[_Future], frame: F.Frame) -> bytes:
    sender = F.Sender(role="master", participant_id="master")
    return codec.encode(frame.__class__(**{**_fields(frame), "sender": sender}))


def _fields(frame: F.Frame) -> dict[str, Any]:
    return {name: getattr(frame, name) for name in frame.__struct_fields__}


def _refusal(core: ClientCore[_Future], message_id: str, code: str = "store_unavailable") -> bytes:
    payload = F.SessionErrorPayload(
        error_code=code, message="not stored", fatal=False, ref_message_id=message_id
    )
    return _master(core, F.SessionError(payload=payload, **core.envelope()))


def _ack(core: ClientCore[_Future], message_id: str, seq: int) -> bytes:
    payload = F.AckPayload(last_seq=seq, last_message_id=message_id)
    return _master(core, F.Ack(payload=payload, **core.envelope()))


@settings(max_examples=60, deadline=None)
@given(sent=st.integers(1, 12), data=st.data(), waiting=st.integers(0, 5))
def test_after_store_unavailable_the_core_resends_from_the_first_refused_frame(
    sent: int, data: st.DataObject, waiting: int
) -> None:
    """The refusals are kept from the caller, the round writes the frames from the first
    refused one, then those that waited behind it, once each and in order; one ack then
    settles every one of them."""
    core = _core()
    frames = [_delta(core, n) for n in range(sent)]
    wire = [_send_live(core, f) for f in frames]
    first = data.draw(st.integers(0, sent - 1))
    for frame in frames[first:]:  # the master refuses the first and every later one
        assert core._received(_refusal(core, frame.message_id)) is None
    assert core.resend_due
    held = [_delta(core, sent + n) for n in range(waiting)]
    held_wire = []
    for frame in held:  # RawpClient.post holds a frame while a round is due
        data_ = core._encode_outgoing(frame)
        core._commits.track(frame.message_id)
        core._hold(data_, frame)
        held_wire.append(data_)
    assert not any(core._commits.futures[f.message_id].done() for f in frames + held)
    writes = core._resend_writes()
    assert writes is not None
    assert list(writes) == wire[first:] + held_wire
    assert not core.resend_due
    assert core.resent == sent - first
    last = (frames + held)[-1].message_id
    assert core._received(_ack(core, last, 99)) is None
    assert all(core._commits.settled[f.message_id] == 99 for f in frames[first:] + held)


def test_other_refusals_still_reach_the_caller() -> None:
    """A refusal that is not store_unavailable settles the frame as refused and is delivered."""
    core = _core()
    frame = _delta(core, 0)
    _send_live(core, frame)
    delivered = core._received(_refusal(core, frame.message_id, code="block_state"))
    assert isinstance(delivered, F.SessionError)
    assert core._commits.settled[frame.message_id].__class__.__name__ == "FrameRefused"
    assert not core.resend_due


def test_with_zero_rounds_the_refusal_reaches_the_caller() -> None:
    """resend_rounds=0 turns the re-sending off: the caller gets the store_unavailable."""
    core = _core(rounds=0)
    frame = _delta(core, 0)
    _send_live(core, frame)
    assert isinstance(core._received(_refusal(core, frame.message_id)), F.SessionError)
    assert not core.resend_due


def test_rounds_without_progress_end_in_a_reattach() -> None:
    """After the last round the core says reattach (None), keeping the frames in flight."""
    core = _core(rounds=1)
    frame = _delta(core, 0)
    _send_live(core, frame)
    core._received(_refusal(core, frame.message_id))
    writes = core._resend_writes()
    assert writes is not None
    assert len(list(writes)) == 1
    core._received(_refusal(core, frame.message_id))
    assert core._resend_writes() is None
    assert core.in_flight == 1  # the reattach's history carries it
