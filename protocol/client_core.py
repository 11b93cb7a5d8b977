"""The client's decisions, sans I/O: what to send, what to buffer, what the master has.

:class:`ClientCore` is the state of one participant in one session and every decision made on
it — the hello and what it resumes, the reattach history and what it carries or sheds, which
frames wait in the outgoing buffer, the ack bookkeeping, what an incoming message changes —
without a socket or an event loop (the model is python-websockets' ``protocol.py``).
:class:`protocol.client.RawpClient` adds the asyncio/websockets connection on top: it writes
what this core says to write and hands it what arrives.

What the client does on its own:

* **Handshake** (notes §5): ``connection.hello`` with the participant id and the cursor
  (``resume.last_seq`` = the last seq received) once it has them, then ``connection.welcome``
  and, on a reattach, the master's backlog as one ``session.history`` (yielded as that History
  frame and folded into :attr:`RawpClient.view`).
* **Acknowledgements**: ``connection.ack`` after every ``ack_every`` frames received and after
  ``ack_interval`` seconds without one, so the master keeps the cursor too.
* **Commits** (notes §16.3): the master acknowledges what it committed of ours with its own
  cumulative ``connection.ack {last_seq, last_message_id}`` and names a refused frame in its
  ``session.error``'s ``ref_message_id``. :meth:`RawpClient.send` waits for that answer (the
  seq, or :class:`FrameRefused`); the typed helpers and :meth:`RawpClient.post` return at once
  and :meth:`RawpClient.committed` / :meth:`RawpClient.flush` wait later. Acknowledged frames
  leave the in-flight window, so a reattach resends only what the master may lack.
* **Re-sending after ``store_unavailable``** (docs/protocol.md §7, :mod:`protocol.resends`):
  the master refuses a frame it cannot make durable and then every later one of the
  connection until the first refused one comes again. The client keeps those refusals from
  the caller, waits (the reconnect backoff over the rounds so far) and writes its frames
  again from the first refused one, in order, each once per round; frames the caller sends
  meanwhile wait in the outgoing buffer behind them. A refused history, or
  ``resend_rounds`` rounds without an acknowledgement, makes it drop the connection and
  reattach instead (the reattach carries every unacknowledged frame). The caller hears of
  it only as for any drop: ``FrameLost`` when a buffer sheds, the reconnect policy's end.
* **Reconnect** with exponential backoff and full jitter (:class:`Backoff`) after any close
  but a refusal (4400, 4401, 4403, 4404, 4409, 4410, 4426), a normal end (1000: the session
  was deleted) or :meth:`RawpClient.close`. The view is finalized locally when the connection
  drops (§7.8.1) and unfinalized by the backlog of the next reattach (§7.8.3).
* **Outgoing frames while disconnected** go to a :class:`~protocol.buffers.BoundedBuffer`
  (RING / DROP / NONE over a byte capacity, the hello's ``buffer``). Frames already written to
  a socket that died stay "in flight" (a byte-bounded window): after the next welcome the
  client drops those ``welcome.received.last_message_id`` says the master has, and sends the
  rest plus the buffered frames as ONE ``session.history`` (§7.1.1) with the buffer's exact
  ``buffer_status`` (in-flight frames were sent once, so they never count as lost) and
  ``last_message_id`` / ``last_sync_timestamp`` of that last frame the master had. A client
  sends such a history after every reattach, empty or not: it is what retracts the master's
  finalization (§7.8.3). An edge may not send histories (notes §4): it sends the same frames
  one by one, and a loss is recorded as a local notice in its view.
* **Persistence**: :meth:`RawpClient.save` writes cursor, participant id, view, unsent and
  in-flight frames to a JSON file atomically (temp file, fsync, rename); a client built with
  that ``state_path`` resumes the same session after an app restart (its view is finalized
  on load, §7.8.2, and unfinalized by the reattach).

Own frames: the master does not echo a participant's frames back (renames aside, which are
folded when their echo arrives; a delete request is never logged, the master's cleanup and
``session.deleted`` are folded instead), so the client folds each frame it sends into its view when
the frame leaves on a socket (a live frame at once, buffered frames inside the history that
carries them). A sender's view can therefore order its own frames slightly differently from
the log when frames from other participants cross them in flight.

Beside the core, sans I/O too: :mod:`protocol.own_frames` (where each frame of ours waits:
buffered, in flight, deferred), :mod:`protocol.reattach` (the history that fits in one frame),
:mod:`protocol.resends` (the rounds after ``store_unavailable``), :mod:`protocol.commits` (what
the master committed or refused) and :mod:`protocol.client_frames` (what callers are handed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic

from . import codec, names
from .buffers import BufferedItem
from .client_errors import ClientError, FrameLost
from .client_frames import DEFAULT_BUFFER, Delivered, create_spec, is_request, unpacked
from .commits import CommitLedger, FutureT
from .errors import CloseCode, DirectionError, InvalidFrame, ProtocolError
from .frames import (
    PROTOCOL_VERSION,
    Ack,
    AckPayload,
    BufferRequest,
    BufferStatus,
    CreateSpec,
    Deleted,
    Frame,
    GenericFrame,
    Hello,
    HelloPayload,
    History,
    Renamed,
    Resume,
    Role,
    SessionError,
    Wake,
    Welcome,
    frame_types,
)
from .own_frames import OwnFrames
from .reattach import fitting_history
from .reconnect import Backoff
from .resends import DEFAULT_RESEND_ROUNDS, Resends, is_store_refusal
from .snapshot import ClientSnapshot
from .state import allowed_types
from .view import SessionView

# ClientCore, and the names defined beside it that callers have imported from here.
__all__ = [
    "DEFAULT_BUFFER",
    "ClientCore",
    "Delivered",
    "create_spec",
    "is_request",
    "unpacked",
]


class ClientCore(Generic[FutureT]):
    """One participant's session state and the decisions on it, with no I/O.

    ``new_future`` makes the futures the commit ledger settles (the adapter's event loop's).
    """

    def __init__(
        self,
        url: str,
        session_id: str,
        *,
        role: Role,
        buffer_request: BufferRequest,
        in_flight_bytes: int | None,
        participant_id: str | None,
        view: SessionView | None,
        state_path: Path | None,
        new_future: Callable[[], FutureT],
        backoff: Backoff | None = None,
        resend_rounds: int | None = DEFAULT_RESEND_ROUNDS,
        presence: bool = True,
        accepts_input_during_turn: bool = False,
    ) -> None:
        self.url = url
        self.session_id = session_id
        self.role: Role = role
        self.buffer_request = buffer_request
        self.presence = presence  # False: no session.presence frames (docs/protocol.md §5)
        # A client that steers: its hello asks for user.message at once, even during its
        # turn (notes §17.3); else they wait for its run to end.
        self.accepts_input_during_turn = accepts_input_during_turn
        self.participant_id = participant_id
        self.generation = 0
        self.epoch: str | None = None
        self.welcome: Welcome | None = None
        self.view = view if view is not None else SessionView(session_id)
        self.state_path = state_path
        self.undecodable_frames = 0
        self._attached_before = False
        self._turn_index = -1
        self._max_frame_bytes: int | None = None
        self._own = OwnFrames(buffer_request, in_flight_bytes)
        self._deleted = False
        self._received_since_ack = 0
        self._acked = 0
        self._commits: CommitLedger[FutureT] = CommitLedger(new_future)
        self._resends = Resends(backoff or Backoff(), resend_rounds)
        self._histories: list[str] = []  # the histories written on this connection

    # --- persistence -----------------------------------------------------------------------

    def _restore(self, snapshot: ClientSnapshot) -> None:
        """Take over the state of ``snapshot`` (its view finalized, §7.8.2)."""
        if snapshot.session_id != self.session_id or snapshot.role != self.role:
            raise ClientError(
                f"{self.state_path} holds {snapshot.role} state for session "
                f"{snapshot.session_id}, not {self.role} state for {self.session_id}"
            )
        self.participant_id = snapshot.participant_id
        self.epoch = snapshot.epoch
        self._attached_before = snapshot.attached_before
        self._turn_index = snapshot.turn_index
        self._own.restore(snapshot)
        # §7.8.2: restoring persisted state when the connection no longer exists finalizes.
        self.view = SessionView.restore(snapshot.view, finalize_now=True)

    def snapshot(self) -> ClientSnapshot:
        """This client's state, as :meth:`save` writes it."""
        synced = self._own.last_sync
        return ClientSnapshot(
            url=self.url,
            session_id=self.session_id,
            role=self.role,
            participant_id=self.participant_id,
            epoch=self.epoch,
            attached_before=self._attached_before,
            turn_index=self._turn_index,
            last_sync_message_id=synced[0] if synced else None,
            last_sync_timestamp=synced[1] if synced else None,
            outgoing=self._own.outgoing.saved(),
            in_flight=self._own.saved_in_flight(),
            deferred=self._own.saved_deferred(),
            view=self.view.snapshot(),
            saved_at=codec.now(),
        )

    # --- what callers read -----------------------------------------------------------------

    @property
    def cursor(self) -> int:
        """The last seq received (``resume.last_seq`` of the next hello)."""
        return self.view.last_seq

    @property
    def buffered(self) -> int:
        """Frames waiting in the outgoing buffer."""
        return len(self._own.outgoing.buffer)

    def buffer_status(self) -> BufferStatus:
        """The §7.1.1 status the outgoing buffer would be sent with now."""
        return self._own.outgoing.status()

    @property
    def in_flight(self) -> int:
        """Frames written to a socket whose commit the master has not acknowledged yet."""
        return len(self._own.in_flight)

    @property
    def unsettled(self) -> int:
        """Frames sent or buffered that the master has not yet committed or refused."""
        return len(self._commits.futures)

    # --- the handshake ---------------------------------------------------------------------

    def _hello_frame(
        self, *, token: str, create: CreateSpec | None, from_start: bool
    ) -> tuple[Hello, bool]:
        """The ``connection.hello`` to open a connection with, and whether it resumes."""
        resume: Resume | None = None
        if self._attached_before:
            resume = Resume(last_seq=self.view.last_seq, last_message_id=self.view.last_message_id)
        elif from_start:
            resume = Resume(last_seq=0)
        hello = Hello(
            payload=HelloPayload(
                protocol_version=PROTOCOL_VERSION,
                role=self.role,
                token=token,
                participant_id=self.participant_id,
                resume=resume,
                buffer=self.buffer_request,
                create=create,
                presence=self.presence,
                accepts_input_during_turn=(
                    True if self.accepts_input_during_turn and self.role == "client" else None
                ),
            ),
            **self._envelope(),
        )
        return hello, resume is not None

    def _welcomed(self, welcome: Welcome, sent_resume: bool) -> None:
        """Take in the welcome of a new connection (the caller then delivers it)."""
        w = welcome.payload
        self.welcome = welcome
        self.participant_id = w.participant_id
        self.generation = w.generation
        self.epoch = w.session.epoch
        self._max_frame_bytes = w.max_frame_bytes
        head = w.session.head_seq
        if not sent_resume:
            self.view.reset_cursor(head)  # the master set our cursor to its head
        elif head < self.view.last_seq:
            # Our cursor is from a log this master does not have (its backlog says truncated).
            self.view.reset_cursor(head)
        self._acked = min(self._acked, self.view.last_seq)
        self._commits.new_connection()
        self._resends.new_connection()
        self._histories.clear()
        received = w.received.last_message_id if w.received is not None else None
        if received:
            self._commits.received_through(received, head, self._own.unsettled_ids())
        self.view.receive(welcome)

    # --- the reattach history (§7.1.1) -----------------------------------------------------

    def _reattach_writes(self, welcome: Welcome) -> Iterator[bytes]:
        """What to write after ``welcome``, one text message per item (§7.1.1).

        A client (agent) sends one ``session.history`` of what the master may not have, then
        the requests that must not ride in it; an edge re-sends its frames one by one. The
        bookkeeping of each write happens when the caller asks for the next one, so a write
        that fails leaves the rest undone, as if the loop had stopped there.
        """
        received = welcome.payload.received.last_message_id if welcome.payload.received else None
        own = self._own
        synced = own.synced_frame(received, welcome.payload.session.created_at)
        items, status = own.take_for_reattach(received)
        if self.role == "client":
            carried: set[str] = set()
            if self._attached_before or items or status.truncated:
                history, sent = fitting_history(
                    items,
                    status,
                    synced,
                    max_frame_bytes=self._max_frame_bytes,
                    envelope=self._envelope,
                )
                own.pending_status = history.payload.buffer_status
                carried = {item.value.message_id for item in sent}
                self._commits.wrote(history.message_id, [item.value.message_id for item in sent])
                self._histories.append(history.message_id)
                yield codec.encode(history)
                own.pending_status = None
                for item in sent:
                    own.remember_sent(item.value)
                self.view.fold(history, "client")
            # Frames the window or the history's size limit shed never reach the master.
            keep = carried | {item.value.message_id for item in own.deferred}
            keep |= own.buffered_ids()
            self._commits.fail_all(keep, FrameLost("shed while disconnected (§7.1.1 buffer)"))
            while own.deferred:
                item = own.deferred[0]
                self._commits.wrote(item.value.message_id, [item.value.message_id])
                yield item.data
                own.deferred.pop(0)
                own.remember_sent(item.value)
                self._fold_own(item.value)
        else:
            if status.truncated:
                lost = status.lost_frame_count
                self.view.note(
                    f"{lost if lost is not None else 'some'} frame(s) sent while disconnected "
                    f"were lost ({status.policy_applied} buffer)"
                )
            keep = {item.value.message_id for item in items} | own.buffered_ids()
            self._commits.fail_all(keep, FrameLost("shed while disconnected (§7.1.1 buffer)"))
            for item in items:
                self._commits.wrote(item.value.message_id, [item.value.message_id])
                yield item.data
                own.remember_sent(item.value)
                self._fold_own(item.value)
        self._attached_before = True

    # --- receiving -------------------------------------------------------------------------

    def _received(self, message: str | bytes) -> Frame | GenericFrame | None:
        """Take in one message from the master: the frame to deliver, or None (an ack, a
        duplicate, something undecodable)."""
        try:
            frame = codec.decode(message)
        except ProtocolError:
            self.undecodable_frames += 1
            return None
        if isinstance(frame, Ack):
            # notes §16.3: the master committed our frames up to last_message_id
            p = frame.payload
            if p.last_message_id is not None:
                newest = self._commits.acked(p.last_message_id, p.last_seq)
                if newest is not None:
                    self._own.acknowledged(newest)
                    self._resends.acknowledged()
            return None  # a connection frame: neither folded nor yielded
        if frame.seq is not None:
            if frame.seq <= self.view.last_seq:
                if isinstance(frame, Wake) and not self.view.has_seen(frame.message_id):
                    # notes §17.5: a wake that came due while this client was away follows
                    # its welcome even when the cursor is past it (a fresh attach starts at
                    # the head): folded and delivered, the cursor stays
                    self.view.fold(frame, "master")
                    return frame
                return None  # already have it
            self._received_since_ack += 1
        elif isinstance(frame, History):
            self._received_since_ack += 1
        elif isinstance(frame, SessionError) and frame.payload.ref_message_id is not None:
            if self._store_refused(frame):
                return None  # §7: we send it again ourselves (see protocol/resends.py)
            # notes §16.3: it names one of ours; earlier frames are not settled by it
            self._commits.refused(frame)
        if isinstance(frame, Deleted):
            self._deleted = True
        self.view.receive(frame)
        return frame

    def _ack_due(self, ack_every: int) -> bool:
        """Whether enough frames arrived since the last ack to send one now."""
        return self._received_since_ack >= ack_every

    def _ack_frame(self) -> tuple[bytes, int] | None:
        """The ``connection.ack`` to send now and the seq it acknowledges (None: not needed)."""
        cursor = self.view.last_seq
        self._received_since_ack = 0
        if cursor <= self._acked:
            return None
        ack = Ack(payload=AckPayload(last_seq=cursor), **self._envelope())
        return codec.encode(ack), cursor

    def _drop_ends_session(self, close_code: int | None) -> bool:
        """Whether a closed connection ended the session (deleted, or a normal close)."""
        return self._deleted or close_code == CloseCode.NORMAL

    # --- re-sending after store_unavailable (§7, protocol/resends.py) ---------------------

    def _store_refused(self, error: SessionError) -> bool:
        """A ``store_unavailable`` naming one of ours that a round re-sends: not settled,
        not delivered. False for any other refusal (the caller settles it)."""
        if not self._resends.enabled or not is_store_refusal(error):
            return False
        ref = error.payload.ref_message_id
        assert ref is not None
        return self._resends.refused(ref, self._own.window_ids(), self._histories)

    @property
    def resend_due(self) -> bool:
        """Frames wait to be re-sent (or a reattach to carry them): new frames wait too."""
        return self._resends.due

    @property
    def resent(self) -> int:
        """Frames this client wrote again after ``store_unavailable`` (§7)."""
        return self._resends.resent

    def _resend_delay(self, rng: Any = None) -> float:
        """Seconds to wait before the next re-send round (backoff over the rounds so far)."""
        return self._resends.delay(rng)

    def _resend_writes(self) -> Iterator[bytes] | None:
        """One re-send round: every frame of the in-flight window from the first refused one,
        in order, then the frames that waited behind it. None: give up on this connection
        and reattach (a refused history, or too many rounds without an acknowledgement).

        The waiting frames count as in flight once the round starts, so a write that fails
        leaves them to the reattach, which carries the whole window.
        """
        again = self._resends.take(self._own.window_ids())
        if again is None:
            return None
        resend, fresh = self._own.take_for_resend(len(again))
        # A frame the buffers or the window shed meanwhile never reaches the master.
        keep = set(self._own.window_ids()) | self._own.buffered_ids()
        self._commits.fail_all(keep, FrameLost("shed while the store was unavailable (§7)"))
        return self._round(resend, fresh)

    def _round(
        self,
        resend: list[BufferedItem[Frame | GenericFrame]],
        fresh: list[BufferedItem[Frame | GenericFrame]],
    ) -> Iterator[bytes]:
        for item in resend:
            self._commits.wrote(item.value.message_id, [item.value.message_id])
            yield item.data
        for item in fresh:
            self._commits.wrote(item.value.message_id, [item.value.message_id])
            yield item.data
            self._own.remember_sent(item.value)
            self._fold_own(item.value)

    # --- sending ---------------------------------------------------------------------------

    def envelope(self) -> dict[str, Any]:
        """Envelope fields for a frame built by hand: a new ``message_id``, this session's
        id and the current time (``F.TextDelta(payload=..., **client.envelope())``)."""
        return {
            "message_id": codec.new_message_id(),
            "session_id": self.session_id,
            "timestamp": codec.now(),
        }

    _envelope = envelope

    def _fold_own(self, frame: Frame | GenericFrame) -> None:
        # The master echoes a rename to its sender (notes §15.9): that copy, with its seq, is
        # folded in log order. A delete request is not logged at all: the master's cleanup
        # frames and its own session.deleted arrive instead (notes §9, §15.8). Every other
        # frame of ours is folded as it leaves.
        if not isinstance(frame, Renamed | Deleted):
            self.view.fold(frame, self.role)

    def _encode_outgoing(self, frame: Frame | GenericFrame) -> bytes:
        """``frame`` on the wire; raises if this role may not send it or it is too big.

        A :class:`GenericFrame` leaves only as an ignorable frame of a type this version does
        not know (docs/protocol.md §3): what a bridge carries that RAWP has no frame for.
        """
        if isinstance(frame, GenericFrame):
            if frame.metadata is None or not frame.metadata.ignorable:
                raise InvalidFrame(f"{frame.type} is not a known type; mark it ignorable")
            if frame.type in frame_types() or not names.is_frame_type(frame.type):
                raise InvalidFrame(f"{frame.type!r} cannot be sent as an ignorable frame")
        elif frame.type not in allowed_types(self.role) or frame.type.startswith("connection."):
            raise DirectionError(f"a {self.role} may not send {frame.type} (notes §4)")
        data = codec.encode(frame)
        if self._max_frame_bytes is not None and len(data) > self._max_frame_bytes:
            raise InvalidFrame(
                f"{frame.type} is {len(data)} bytes; the master accepts {self._max_frame_bytes}"
            )
        return data

    def _sent_live(self, data: bytes, frame: Frame | GenericFrame) -> None:
        """``frame`` left on a live socket: in flight until the master acknowledges it."""
        self._own.sent_live(data, frame)
        self._fold_own(frame)

    def _hold(self, data: bytes, frame: Frame | GenericFrame) -> None:
        """No live socket: keep ``frame`` for the next reattach."""
        # A delete request or a fatal error starts the master's termination procedure only
        # when it arrives live (notes §9): it follows the history, never in it.
        self._own.hold(data, frame, after_history=self.role == "client" and is_request(frame))
