"""The shared view corpus: frame streams and the Python SessionView's result, as JSON fixtures.

The TypeScript SDK (``sdk/typescript``) carries a second implementation of the session view
(``protocol/view.py``, ``protocol/finalize.py``, ``protocol/state.py``). This module keeps the
two honest: it draws cases from the Hypothesis strategies of ``tests/protocol/strategies.py``
(realistic streams, random frames the state machine may refuse, random drops and cut points,
the master's own finalization, client histories, truncated backlogs, snapshot and restore),
runs them through the Python view and writes each case's steps with the view's result after
every check point. The TypeScript tests replay every step and must reach the same results.

Generation is deterministic (derandomized Hypothesis, fixed ids and timestamps)::

    .venv/bin/python -m tests.sdk_corpus          # rewrite sdk/typescript/test/corpus/
    .venv/bin/python -m tests.sdk_corpus --check  # exit 1 when the fixtures are stale

``tests/protocol/test_sdk_corpus.py`` runs the check as part of ``make test``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from protocol import codec
from protocol import frames as F
from protocol.buffers import BufferedItem, select_backlog
from protocol.finalize import finalize, replay
from protocol.state import SenderRole
from protocol.view import SessionView

from .protocol import strategies as S

CORPUS_DIR = Path(__file__).resolve().parent.parent / "sdk" / "typescript" / "test" / "corpus"
CASES = 120
PER_FILE = 40
FORMAT = 1

SENDERS: dict[SenderRole, F.Sender] = {
    "client": F.Sender(role="client", participant_id="p-client"),
    "edge": F.Sender(role="edge", participant_id="p-edge"),
    "master": S.MASTER,
}
TAGS = sorted(F.frame_types())

Step = dict[str, Any]


def _json(frame: F.Frame | F.GenericFrame) -> Any:
    return json.loads(codec.encode(frame))


def _result(view: SessionView) -> dict[str, Any]:
    """Everything a UI reads from the view, plus the state machine's facts."""
    state = view.state
    return {
        "blocks": msgspec.to_builtins(view.blocks),
        "totals": msgspec.to_builtins(view.totals),
        "notices": msgspec.to_builtins(view.notices),
        "status": view.status,
        "agent_state": view.agent_state,
        "name": view.name,
        "last_seq": view.last_seq,
        "last_message_id": view.last_message_id,
        "skipped": view.skipped,
        "finalized_locally": view.finalized_locally,
        "participants": dict(view.participants),
        "state": {
            "phase": state.phase.value,
            "turn_id": state.turn_id,
            "last_turn_index": state.last_turn_index,
            "open_text": sorted(state.open_text),
            "open_thinking": sorted(state.open_thinking),
            "closed_blocks": sorted(state.closed_blocks),
            "open_calls": list(state.open_calls),
            "pending_interactions": sorted(state.pending_interactions),
            "pending_revisits": list(state.pending_revisits),  # in the order asked
            "turns_completed": state.turns_completed,
            "input_tokens": state.input_tokens,
            "output_tokens": state.output_tokens,
            "compactions": state.compactions,
            "finalized": state.finalized,
        },
    }


class _Log:
    """A session log in the making: dense seqs and the master's sender stamps."""

    def __init__(self) -> None:
        self.entries: list[tuple[F.Frame, SenderRole]] = []
        self._seqs = itertools.count(1)

    def add(self, frame: F.Frame, role: SenderRole) -> F.Frame:
        stamped = msgspec.structs.replace(frame, seq=next(self._seqs), sender=SENDERS[role])
        self.entries.append((stamped, role))
        return stamped


def _deterministic(frames: list[F.Frame], prefix: str) -> list[F.Frame]:
    """Fixed ids and timestamps for frames made with random ones (finalize)."""
    return [
        msgspec.structs.replace(f, message_id=f"{prefix}-{i}", timestamp=S.TS)
        for i, f in enumerate(frames)
    ]


def _noisy(data: st.DataObject, stream: S.Stream) -> S.Stream:
    """The stream with random well-formed frames inserted (the state machine may refuse them)."""
    out: S.Stream = []
    for frame, role in stream:
        if data.draw(st.integers(0, 2)) == 0:
            state = replay(out)
            tag = data.draw(st.sampled_from(TAGS))
            noise = data.draw(S.frames_of_type(tag, state))
            out.append((noise, data.draw(st.sampled_from(S.ROLES))))
        out.append((frame, role))
    return out


def _backlog(
    data: st.DataObject, entries: list[tuple[F.Frame, SenderRole]]
) -> tuple[F.History, list[F.Frame]]:
    """The master's reattach backlog over ``entries``, bounded by a random buffer policy."""
    policy = data.draw(st.sampled_from(["RING", "DROP", "NONE", "RING"]))
    items = [BufferedItem(codec.encode(f), f) for f, _ in entries]
    total = sum(item.size for item in items)
    capacity = data.draw(st.integers(0, total + 10)) if total else 0
    if data.draw(st.booleans()):
        capacity = total + 1  # everything fits: the common case
    chosen = select_backlog(items, policy, capacity)  # type: ignore[arg-type]
    kept: list[F.Frame | bytes] = [item.value for item in chosen.items]
    if data.draw(st.integers(0, 9)) == 0:
        kept.append(b'{"type": "agent.text.delta", "payload": {}}')  # undecodable element
    history = S.history(kept, sender=S.MASTER)
    history = msgspec.structs.replace(
        history,
        payload=msgspec.structs.replace(history.payload, buffer_status=chosen.status),
    )
    return history, [item.value for item in chosen.items]


def _case(data: st.DataObject, number: int) -> dict[str, Any]:
    S._message_ids = itertools.count(1)  # ids restart with every case: fixtures stay stable
    end = data.draw(st.sampled_from(["any", "any", "turn_open", "idle", "usage_due", "terminated"]))
    stream = data.draw(S.streams(max_steps=40, end=end))
    noise = data.draw(st.booleans())
    if noise:
        stream = _noisy(data, stream)
    client_drop = data.draw(st.booleans())
    own = data.draw(st.integers(0, 4)) == 0
    log = _Log()
    cut = data.draw(st.integers(0, len(stream)))
    for frame, role in stream[:cut]:
        log.add(frame, role)
    if client_drop and (cut < len(stream) or data.draw(st.booleans())):
        # The client vanished at the cut: the master finalizes (logged), then the client's
        # reattach history carries what it produced meanwhile; edges go on.
        state = replay(log.entries)
        fin = finalize(state, session_id=S.SESSION_ID, sender=S.MASTER)
        for frame in _deterministic(fin, f"fin{number}"):
            log.add(frame, "master")
        rest = stream[cut:]
        inner = [f for f, role in rest if role == "client" and not isinstance(f, F.History)]
        split = data.draw(st.integers(0, len(inner)))
        truncated = data.draw(st.integers(0, 4)) == 0
        log.add(S.history(inner[:split], truncated=truncated), "client")
        for frame in inner[split:]:
            log.add(frame, "client")
        for frame, role in rest:
            if role != "client":
                log.add(frame, role)
    else:
        for frame, role in stream[cut:]:
            log.add(frame, role)
    entries = log.entries

    view = SessionView(S.SESSION_ID)
    steps: list[Step] = []

    def check() -> None:
        steps.append({"op": "expect", "view": _result(view)})

    def receive(frame: F.Frame | F.GenericFrame) -> None:
        view.receive(frame)
        steps.append({"op": "receive", "frame": _json(frame)})

    def restore() -> None:
        nonlocal view
        view = _restore_into(view)
        steps.append({"op": "restore"})
        check()

    def fold(frame: F.Frame, role: SenderRole) -> None:
        bare = msgspec.structs.replace(frame, seq=None, sender=None)
        view.fold(bare, role)
        steps.append({"op": "fold", "role": role, "frame": _json(bare)})

    # The watching participant: an edge (or, with ``own``, the client folding its own frames)
    # that may drop at a random point and reattach with the master's backlog.
    edge_cut = data.draw(st.integers(0, len(entries)))
    drops = data.draw(st.integers(0, 3)) != 0
    resume = data.draw(st.integers(edge_cut, len(entries))) if drops else edge_cut
    restore_at = data.draw(st.integers(-1, len(entries)))

    def deliver(index: int) -> None:
        frame, role = entries[index]
        if own and role == "client":
            fold(frame, role)
        else:
            receive(frame)

    for index in range(edge_cut):
        if index == restore_at:
            restore()
        deliver(index)
    if drops:
        view.connection_lost()
        steps.append({"op": "connection_lost"})
        check()
        if data.draw(st.integers(0, 4)) == 0:
            # restored after an app restart while disconnected (§7.8.2)
            restore()
        history, _ = _backlog(data, entries[edge_cut:resume])
        receive(history)
        check()
    for index in range(resume, len(entries)):
        deliver(index)
    check()
    return {"name": f"case-{number:03d}", "steps": steps}


def _restore_into(view: SessionView) -> SessionView:
    saved = msgspec.json.decode(msgspec.json.encode(view.snapshot()), type=type(view.snapshot()))
    return SessionView.restore(saved, finalize_now=True)


def generate(count: int = CASES) -> list[dict[str, Any]]:
    """Draw ``count`` cases deterministically."""
    cases: list[dict[str, Any]] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def draw(data: st.DataObject) -> None:
        cases.append(_case(data, len(cases)))

    saved = S._message_ids  # other tests keep counting where they were
    try:
        draw()
    finally:
        S._message_ids = saved
    return cases


def _files(cases: list[dict[str, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for start in range(0, len(cases), PER_FILE):
        chunk = cases[start : start + PER_FILE]
        lines = [json.dumps(case, sort_keys=True, separators=(",", ":")) for case in chunk]
        head = f'{{"format":{FORMAT},"generator":"tests/sdk_corpus.py","cases":[\n'
        out[f"view-{start // PER_FILE:02d}.json"] = head + ",\n".join(lines) + "\n]}\n"
    return out


def stale_files(directory: Path = CORPUS_DIR) -> list[str]:
    """The fixture files that differ from a fresh generation (or are missing or extra)."""
    wanted = _files(generate())
    present = {p.name for p in directory.glob("view-*.json")} if directory.exists() else set()
    stale = [name for name in sorted(present - set(wanted))]
    for name, text in wanted.items():
        path = directory / name
        if not path.exists() or path.read_text() != text:
            stale.append(name)
    return stale


def write(directory: Path = CORPUS_DIR) -> list[Path]:
    """Rewrite the fixtures."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("view-*.json"):
        old.unlink()
    paths = []
    for name, text in _files(generate()).items():
        path = directory / name
        path.write_text(text)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 when the fixtures are stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        if stale:
            print(f"stale SDK corpus files: {', '.join(stale)}; run python -m tests.sdk_corpus")
            return 1
        print("SDK corpus is up to date")
        return 0
    for path in write():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
