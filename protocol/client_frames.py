"""What the client hands its callers and makes of their arguments, sans I/O.

:class:`Delivered` (one frame as :meth:`protocol.client.RawpClient.frames` yields it), the
frames inside a ``session.history`` (:func:`unpacked`), the create spec a ``create=`` argument
stands for, which of our frames are requests that must arrive live (:func:`is_request`) and the
reattach buffer asked for by default, and the wakes a frame brings (:func:`wakes_in`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from . import codec
from .errors import ProtocolError
from .frames import (
    BufferRequest,
    CreateSpec,
    Deleted,
    Frame,
    GenericFrame,
    History,
    SessionError,
    Wake,
)

__all__ = ["DEFAULT_BUFFER", "Delivered", "create_spec", "is_request", "unpacked", "wakes_in"]

DEFAULT_BUFFER: Final = BufferRequest(policy="RING", capacity_bytes=256 * 1024)
"""The buffer asked for when none is given: RING over 256 KiB (fits in one 1 MiB frame)."""


@dataclass(frozen=True, slots=True)
class Delivered:
    """One frame as :meth:`RawpClient.frames` yields it.

    ``replayed`` is True for a frame that arrived inside a ``session.history`` (§7.1.1): the
    master's backlog on (re)attach, or an agent's reattach history; ``history`` is then that
    History frame. Live frames have ``replayed`` False and no ``history``.
    """

    frame: Frame | GenericFrame
    replayed: bool = False
    history: History | None = None


def unpacked(history: History) -> list[Frame | GenericFrame]:
    """The frames inside ``history``, histories inside it opened too (a backlog holds the
    agent's logged reattach histories as entries)."""
    frames: list[Frame | GenericFrame] = []
    for raw in history.payload.frames:
        try:
            inner = codec.decode(raw)
        except ProtocolError:
            continue  # what the master logged was checked; tolerate entries of older builds
        if isinstance(inner, History):
            frames.extend(unpacked(inner))
        else:
            frames.append(inner)
    return frames


def wakes_in(frame: Frame | GenericFrame) -> list[Wake]:
    """The ``session.wake`` frames a delivered frame is or carries (a backlog's), in order."""
    if isinstance(frame, Wake):
        return [frame]
    if isinstance(frame, History) and frame.seq is None:
        return [inner for inner in unpacked(frame) if isinstance(inner, Wake)]
    return []


def create_spec(create: CreateSpec | str | bool | None) -> CreateSpec | None:
    """The create spec a ``create=`` argument stands for (None: do not create)."""
    if create is None or create is False:
        return None
    if create is True:
        return CreateSpec()
    if isinstance(create, str):
        return CreateSpec(name=create)
    return create


def is_request(frame: Frame | GenericFrame) -> bool:
    """A frame that asks the master to act (notes §9) rather than one the log keeps."""
    if isinstance(frame, Deleted):
        return True
    return isinstance(frame, SessionError) and frame.payload.fatal
