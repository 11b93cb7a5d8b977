"""``rawp schemas`` and ``rawp validate``: the protocol package's subcommands.

* ``rawp schemas [--out DIR] [--check]`` writes the JSON Schemas of :mod:`protocol.schema`
  (``--check`` only reports, exit 1 when the files are stale).
* ``rawp validate FILE [--sequence] [--json]`` checks a JSON Lines file of envelopes: each
  line on its own with :func:`protocol.codec.decode` and the frame-level rules the master
  enforces beyond decoding (:func:`frame_problem`: the state machine's checks that need no
  session, e.g. compaction token counts; §7.1.1 every element of a history's ``frames`` is a
  complete envelope of the same session), and with ``--sequence`` the whole stream against
  the session state machine (notes §6) in order, exactly as the master folds it.

:func:`validate_lines` is the reusable core (no I/O besides the iterable it is given).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

from . import codec, names, schema
from .errors import DirectionError, InvalidFrame, ProtocolError
from .finalize import fold, plan_history
from .frames import Frame, GenericFrame, History
from .state import SenderRole, SessionState, allowed_types, check

__all__ = [
    "LineResult",
    "SequenceChecker",
    "frame_problem",
    "infer_role",
    "register",
    "validate_lines",
]

_EDGE_ONLY: Final = allowed_types("edge") - allowed_types("client")
_CONNECTION_TYPES: Final = frozenset({"connection.hello", "connection.welcome", "connection.ack"})

_VALIDATE_EPILOG = """\
Each non-blank line must hold one envelope (notes §3). A line that is not JSON, not an
object or not a valid frame is reported 'invalid invalid_frame'; an unknown type without
metadata.ignorable is 'unknown_type'. The frame-level rules the master enforces beyond the
frame's shape are checked too (compaction token counts, renamed_by, synthetic frames only
from the master, and every element of a session.history's frames a complete envelope of the
same session, §7.1.1).

With --sequence the frames are also folded, in order, into one session state (notes §6).
The sender's role is the frame's sender.role when present; otherwise a type only an edge
may send (user.message, control.*) is taken as the edge's and anything else as the client's.
session.history frames are folded with their inner frames (§7.8.3) as the master does: an
inner frame that is not a valid envelope of the session, or that the state machine refuses,
makes the history's line invalid and is left out; the others are folded. A frame whose
message_id was already seen is ignored (logged once, notes §7). connection.* frames are
checked for direction but never folded. A usage_missing warning (§7.5.2: the client's next
frame after session.turn.end was not session.usage) counts as invalid with that code for the
line it is reported on, although the frame is still folded, as the master does.

Output: 'LINE ok' or 'LINE invalid CODE: message' per line; with --json one object per line:
{"line": N, "valid": bool, "error_code": str|null, "message": str|null}.
Exit status: 0 every line valid, 1 some line invalid, 2 the input could not be read.
"""


@dataclass(frozen=True, slots=True)
class LineResult:
    """The verdict on one input line."""

    line: int
    valid: bool
    error_code: str | None = None
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` object for this line."""
        return {
            "line": self.line,
            "valid": self.valid,
            "error_code": self.error_code,
            "message": self.message,
        }

    def to_text(self) -> str:
        """The plain output line."""
        if self.valid:
            return f"{self.line} ok"
        # Messages quote what the file holds: the shared terminal escaping keeps one line
        # per input line and no escape sequence (--json keeps the exact text).
        return f"{self.line} invalid {self.error_code}: {names.one_line(self.message or '')}"


def infer_role(frame: Frame | GenericFrame) -> SenderRole:
    """The frame's ``sender.role``; else edge for edge-only types, else client."""
    if frame.sender is not None:
        return frame.sender.role
    return "edge" if frame.type in _EDGE_ONLY else "client"


def _line_roles(frame: Frame | GenericFrame) -> tuple[SenderRole, ...]:
    """For one frame on its own: its ``sender.role``, else every role that may send it."""
    if frame.sender is not None:
        return (frame.sender.role,)
    roles: tuple[SenderRole, ...] = ("client", "edge", "master")
    return tuple(r for r in roles if frame.type in allowed_types(r)) or ("master",)


def _inner_frames(
    history: History,
) -> tuple[list[Frame | GenericFrame], ProtocolError | None]:
    """A history's inner frames that are complete envelopes of its session (§7.1.1).

    Returns them and the first problem with the others, in the words the master uses.
    """
    frames: list[Frame | GenericFrame] = []
    problem: ProtocolError | None = None
    for index, raw in enumerate(history.payload.frames):
        try:
            inner = codec.decode(raw)
        except ProtocolError as exc:
            problem = problem or type(exc)(f"payload.frames[{index}]: {exc.message}")
            continue
        except RecursionError:
            problem = problem or InvalidFrame(f"payload.frames[{index}]: nested too deeply")
            continue
        if inner.session_id != history.session_id:
            problem = problem or ProtocolError(
                f"payload.frames[{index}] ({inner.message_id}) names another session"
            )
            continue
        frames.append(inner)
    return frames, problem


def frame_problem(frame: Frame | GenericFrame) -> ProtocolError | None:
    """The first frame-level rule ``frame`` breaks beyond decoding, or None.

    These are the master's checks that need no session: the state machine's checks run
    against a fresh session (:func:`protocol.state.check`) for the frame's ``sender.role``
    (without one, for each role that may send the type: valid when one passes), keeping only
    what refuses the frame itself (``invalid_frame``, ``direction``), not what depends on
    the session's state (``turn_state``, ``tool_pairing``, …, judged by ``--sequence``); for a
    ``session.history``, each inner frame must be a complete envelope of the same session
    (§7.1.1) and pass the same rules.
    """
    if frame.type in _CONNECTION_TYPES:
        return None  # judged by the handshake, not the state machine
    if isinstance(frame, History):
        inner, problem = _inner_frames(frame)
        if problem is not None:
            return problem
        for index, item in enumerate(inner):
            found = frame_problem(item)
            if found is not None:
                return type(found)(f"payload.frames[{index}]: {found.message}")
        return None
    first: ProtocolError | None = None
    for role in _line_roles(frame):  # valid when some role may send it as it is
        try:
            check(SessionState(), frame, role)
        except (InvalidFrame, DirectionError) as exc:
            first = first or exc
            continue
        except ProtocolError:
            return None  # a rule of the session's state, not of the frame
        return None
    return first


class SequenceChecker:
    """Folds a stream of frames into one :class:`~protocol.state.SessionState` (notes §6)."""

    def __init__(self) -> None:
        self.state = SessionState()
        self.seen: set[str] = set()

    def feed(self, frame: Frame | GenericFrame) -> ProtocolError | None:
        """Fold ``frame``; returns the error or warning that makes its line invalid, if any.

        A refused frame leaves the state unchanged; a ``usage_missing`` warning is returned
        after the frame was folded. A frame whose message_id was seen before is ignored, as
        the master logs a frame once (notes §7).
        """
        if frame.message_id in self.seen:
            return None
        role = infer_role(frame)
        try:
            if isinstance(frame, History):
                return self._feed_history(frame, role)
            if frame.type in _CONNECTION_TYPES:
                if frame.type not in allowed_types(role):
                    raise DirectionError(f"a {role} may not send {frame.type} (notes §4)")
                return None
            warnings = fold(self.state, frame, role)
        except ProtocolError as exc:
            return exc
        self.seen.add(frame.message_id)
        return warnings[0] if warnings else None

    def _feed_history(self, history: History, role: SenderRole) -> ProtocolError | None:
        """Fold a history as the master does: the good inner frames, the first problem."""
        if "session.history" not in allowed_types(role):
            raise DirectionError(f"a {role} may not send session.history (notes §4)")
        decoded, problem = _inner_frames(history)
        frames = [f for f in decoded if f.message_id not in self.seen]
        plan = plan_history(self.state, frames, history.payload.buffer_status, role)
        self.state = plan.state
        self.seen.add(history.message_id)
        self.seen.update(f.message_id for f in plan.accepted)
        if problem is not None or not plan.refused:
            return problem
        refused, error = plan.refused[0]
        index = next(i for i, frame in enumerate(frames) if frame is refused)
        return type(error)(f"payload.frames[{index}] ({refused.type}) refused: {error.message}")


def validate_lines(lines: Iterable[bytes], *, sequence: bool = False) -> Iterator[LineResult]:
    """Judge each non-blank line (1-based numbers; blank lines are skipped)."""
    checker = SequenceChecker() if sequence else None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            frame = codec.decode(line)
        except ProtocolError as exc:
            yield LineResult(number, False, exc.code, exc.message)
            continue
        except RecursionError:
            yield LineResult(number, False, InvalidFrame.code, "the JSON is nested too deeply")
            continue
        problem = checker.feed(frame) if checker is not None else frame_problem(frame)
        if problem is None:
            yield LineResult(number, True)
        else:
            yield LineResult(number, False, problem.code, problem.message)


# --- argparse ------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``schemas`` and ``validate`` to the ``rawp`` command."""
    schemas = subparsers.add_parser(
        "schemas",
        help="write (or check) the JSON Schemas of every frame",
        description="Generate JSON Schema 2020-12 files from the frame definitions: one per "
        "frame type (<type>.json) and one per union (any-frame, client-frame, edge-frame, "
        "master-frame).",
    )
    schemas.add_argument(
        "--out", type=Path, default=Path("schemas"), help="directory (default: schemas)"
    )
    schemas.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when a file is missing, outdated or obsolete "
        "(default: write them)",
    )
    schemas.set_defaults(handler=_schemas)

    validate = subparsers.add_parser(
        "validate",
        help="check a JSON Lines file of frames",
        description="Check envelopes, one per line, against the RAWP frame definitions.",
        epilog=_VALIDATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    validate.add_argument("file", metavar="FILE", help="JSON Lines file, or - for stdin (required)")
    validate.add_argument(
        "--sequence",
        action="store_true",
        help="also check the stream, in order, against the session state machine "
        "(default: each line on its own)",
    )
    validate.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per line instead of text (default: text)",
    )
    validate.set_defaults(handler=_validate)

    from .tail import add_tail_parser

    add_tail_parser(subparsers)


def _schemas(args: argparse.Namespace) -> int:
    out: Path = args.out
    if args.check:
        stale = schema.stale_files(out)
        for name in stale:
            print(f"stale: {out / name}")
        if stale:
            print("run `make schemas` (rawp schemas --out DIR) to regenerate", file=sys.stderr)
            return 1
        print(f"{out}: {len(schema.generate())} schemas up to date")
        return 0
    try:
        changed = schema.write(out)
    except OSError as exc:
        print(f"rawp schemas: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    for name in changed:
        print(f"wrote {out / name}")
    print(f"{out}: {len(changed)} changed, {len(schema.generate())} schemas")
    return 0


def _validate(args: argparse.Namespace) -> int:
    try:
        stream: BinaryIO = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")  # noqa: SIM115
    except OSError as exc:
        print(f"rawp validate: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    all_valid = True
    try:
        for result in validate_lines(stream, sequence=args.sequence):
            all_valid = all_valid and result.valid
            text = json.dumps(result.to_json()) if args.json else result.to_text()
            print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`rawp validate ... | head`): not a read error. Point stdout
        # at /dev/null so the interpreter's final flush does not complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0 if all_valid else 1
    except OSError as exc:
        print(f"rawp validate: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    return 0 if all_valid else 1
