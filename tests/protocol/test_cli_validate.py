"""`rawp validate`: per-line checks, --sequence state machine checks, output, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from rawp.cli import main

from .vectors import load_vectors

SID = "s-cli"
MASTER = {"role": "master", "participant_id": "node-a"}


def frame(type_: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """An envelope with a fresh message id."""
    envelope: dict[str, Any] = {
        "type": type_,
        "message_id": str(uuid.uuid4()),
        "session_id": SID,
        "timestamp": "2026-11-29T09:00:00.000Z",
        "payload": payload,
    }
    envelope.update(extra)
    return envelope


def usage(turn_id: str) -> dict[str, Any]:
    """A valid session.usage frame for ``turn_id``."""
    return frame(
        "session.usage",
        {
            "turn_id": turn_id,
            "token_usage": {"input_tokens": 10, "output_tokens": 20},
            "cost_usage": {"limit": -1, "used": 0.01, "unit": "USD"},
            "message_usage": {"limit": 100, "used": 1, "unit": "COUNT"},
            "time_to_reset": "PT5H",
        },
    )


def jsonl(*lines: dict[str, Any] | str) -> str:
    """JSON Lines text: dicts are encoded, strings written as they are."""
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)


def run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | bytes, *options: str
) -> tuple[int, list[str], str]:
    """Run `rawp validate FILE *options` on ``text``; returns (exit code, stdout lines, stderr)."""
    path = tmp_path / "frames.jsonl"
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8")
    else:
        path.write_bytes(text)
    capsys.readouterr()
    code = main(["validate", str(path), *options])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def turn_frames(turn_id: str) -> list[dict[str, Any]]:
    """A complete well-formed turn: start, text, tool call and result, end, usage."""
    return [
        frame("session.turn.start", {"turn_id": turn_id, "turn_index": 0}),
        frame("agent.text.delta", {"block_id": "b-1", "delta": "Reading"}),
        frame("agent.text.done", {"block_id": "b-1"}),
        frame("tool.invoke.request", {"call_id": "c-1", "tool_name": "ls", "input": {}}),
        frame("tool.invoke.result", {"call_id": "c-1", "status": "ok", "output": "a b"}),
        frame("session.turn.end", {"turn_id": turn_id, "stop_reason": "end_turn"}),
        usage(turn_id),
    ]


def test_all_valid_lines_exit_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every valid line prints 'N ok' and the exit status is 0."""
    code, out, _ = run(tmp_path, capsys, jsonl(*turn_frames(str(uuid.uuid4()))), "--sequence")
    assert code == 0
    assert out == [f"{n} ok" for n in range(1, 8)]


def test_not_json_is_invalid_frame_and_blank_lines_are_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line that is not JSON is invalid_frame; blank lines are skipped (numbers stay physical)."""
    text = jsonl(frame("user.message", {"text": "hi"}), "", "   ", "{not json", "[1, 2]")
    code, out, _ = run(tmp_path, capsys, text)
    assert code == 1
    assert out[0] == "1 ok"
    assert out[1].startswith("4 invalid invalid_frame: ")
    assert out[2].startswith("5 invalid invalid_frame: ")
    assert len(out) == 3


def test_json_output_has_one_object_per_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--json prints {line, valid, error_code, message} for each non-blank line."""
    bad = frame("session.turn.start", {"turn_id": "turn-1", "turn_index": 0})
    code, out, _ = run(tmp_path, capsys, jsonl(frame("control.cancel", {}), "", bad), "--json")
    assert code == 1
    first, second = (json.loads(line) for line in out)
    assert first == {"line": 1, "valid": True, "error_code": None, "message": None}
    assert set(second) == {"line", "valid", "error_code", "message"}
    assert second["line"] == 3
    assert second["valid"] is False
    assert second["error_code"] == "invalid_frame"
    assert "turn_id" in second["message"]


def test_missing_file_exits_two(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An input that cannot be read exits 2 with a message on stderr."""
    assert main(["validate", str(tmp_path / "absent.jsonl")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "cannot read" in captured.err


def test_unknown_type_and_ignorable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown type is unknown_type, unless metadata.ignorable is true."""
    unknown = frame("agent.plan.update", {"steps": 2})
    ignorable = {**unknown, "metadata": {"ignorable": True}}
    code, out, _ = run(tmp_path, capsys, jsonl(unknown, ignorable), "--sequence")
    assert code == 1
    assert out[0].startswith("1 invalid unknown_type: ")
    assert out[1] == "2 ok"


def test_garbage_never_crashes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Invalid UTF-8, deep nesting and non-object JSON are invalid_frame lines, not crashes."""
    nested = b'{"x":' + b"[" * 100_000 + b"]" * 100_000 + b',"type":"user.message"}'
    text = b"\xff\xfe\n" + nested + b"\nnull\n42\n"
    code, out, _ = run(tmp_path, capsys, text, "--sequence")
    assert code == 1
    assert [line.split(" ", 2)[:2] for line in out] == [[str(n), "invalid"] for n in range(1, 5)]
    assert all(" invalid invalid_frame: " in line for line in out)


def test_without_sequence_state_rules_are_not_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Frames are checked on their own unless --sequence is given."""
    turn_end = frame("session.turn.end", {"turn_id": str(uuid.uuid4()), "stop_reason": "end_turn"})
    assert run(tmp_path, capsys, jsonl(turn_end))[0] == 0
    code, out, _ = run(tmp_path, capsys, jsonl(turn_end), "--sequence")
    assert code == 1
    assert out[0].startswith("1 invalid turn_state: ")


def test_sequence_reports_usage_missing_and_keeps_folding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A client frame other than usage right after turn.end is usage_missing; it still folds."""
    turn_id = str(uuid.uuid4())
    frames = turn_frames(turn_id)[:-1]  # no usage after the turn end
    late = frame("session.turn.start", {"turn_id": str(uuid.uuid4()), "turn_index": 1})
    again = frame("session.turn.start", {"turn_id": str(uuid.uuid4()), "turn_index": 2})
    code, out, _ = run(tmp_path, capsys, jsonl(*frames, late, again), "--sequence")
    assert code == 1
    assert out[6].startswith("7 invalid usage_missing: ")
    # The warned frame opened turn 1, so another turn.start is refused: the turn is open.
    assert out[7].startswith("8 invalid turn_state: ")


def test_sequence_infers_roles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without sender, edge-only types are the edge's and the rest the client's; sender wins."""
    ask = frame(
        "agent.interaction.request", {"interaction_id": "i-1", "kind": "input", "prompt": "?"}
    )
    answer = frame("control.interaction.response", {"interaction_id": "i-1", "response": "yes"})
    edge_tool = frame(
        "tool.invoke.request",
        {"call_id": "c-1", "tool_name": "ls", "input": {}},
        sender={"role": "edge", "participant_id": "p-e"},
    )
    code, out, _ = run(
        tmp_path,
        capsys,
        jsonl(frame("user.message", {"text": "go"}), ask, answer, edge_tool),
        "--sequence",
    )
    assert code == 1
    assert out[:3] == ["1 ok", "2 ok", "3 ok"]
    assert out[3].startswith("4 invalid direction: ")


def test_sequence_folds_a_client_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finalization then the client's history (§7.8.3) validates; a refused inner frame does not."""
    turn_id = str(uuid.uuid4())
    start = frame("session.turn.start", {"turn_id": turn_id, "turn_index": 0})
    delta = frame("agent.text.delta", {"block_id": "b-1", "delta": "Read"})
    synthetic = {"sender": MASTER, "metadata": {"synthetic": True}}
    finalized = [
        frame("agent.text.done", {"block_id": "b-1"}, **synthetic),
        frame("session.turn.end", {"turn_id": turn_id, "stop_reason": "disconnected"}, **synthetic),
    ]
    replayed = [
        frame("agent.text.delta", {"block_id": "b-1", "delta": "ing"}),
        frame("agent.text.done", {"block_id": "b-1"}),
        frame("session.turn.end", {"turn_id": turn_id, "stop_reason": "end_turn"}),
    ]
    status = {"policy_applied": "RING", "truncated": False, "lost_frame_count": 0}

    def history(frames: list[dict[str, Any]]) -> dict[str, Any]:
        return frame(
            "session.history",
            {
                "frames": frames,
                "buffer_status": status,
                "last_sync_timestamp": "2026-11-29T09:00:00Z",
                "last_message_id": delta["message_id"],
            },
        )

    good = jsonl(start, delta, *finalized, history(replayed), usage(turn_id))
    code, out, _ = run(tmp_path, capsys, good, "--sequence")
    assert (code, out) == (0, [f"{n} ok" for n in range(1, 7)])

    broken = [
        *replayed[:2],
        frame("session.turn.end", {"turn_id": "other", "stop_reason": "error"}),
    ]
    code, out, _ = run(
        tmp_path, capsys, jsonl(start, delta, *finalized, history(broken)), "--sequence"
    )
    assert code == 1
    assert out[4].startswith("5 invalid turn_state: payload.frames[2] (session.turn.end) refused")


def test_vectors_through_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each test vector gets the verdict its file states when run through `rawp validate`."""
    vectors = load_vectors()
    text = "".join(vector.frame_bytes().decode() + "\n" for vector in vectors)
    code, out, _ = run(tmp_path, capsys, text, "--json")
    assert code == 1
    results = [json.loads(line) for line in out]
    assert len(results) == len(vectors)
    for vector, result in zip(vectors, results, strict=True):
        assert result["valid"] is vector.valid, vector.id
        assert result["error_code"] == vector.error_code, vector.id


def test_stdin_through_the_installed_command() -> None:
    """The installed `rawp` script reads stdin for '-' and exits 1 when a line is invalid."""
    script = Path(sys.executable).with_name("rawp")
    if not script.exists():
        pytest.skip("the rawp console script is not installed next to this interpreter")
    text = jsonl(frame("user.message", {"text": "hi"}), "oops")
    done = subprocess.run(
        [str(script), "validate", "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[0] == "1 ok"
    assert done.stdout.splitlines()[1].startswith("2 invalid invalid_frame: ")


def test_closed_output_is_not_a_read_error(tmp_path: Path) -> None:
    """`rawp validate --json FILE | head -1`: the closed pipe is not reported as a read error."""
    line = json.dumps(frame("user.message", {"text": "hi"}))
    path = tmp_path / "many.jsonl"
    path.write_text("\n".join([line] * 20000) + "\n", encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-m", "rawp.cli", "validate", "--json", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()
    errors = process.stderr.read().decode()
    assert process.wait(timeout=30) == 0
    assert json.loads(first)["valid"] is True
    assert "cannot read" not in errors
    assert "Traceback" not in errors


def test_messages_name_what_a_value_must_be(tmp_path: Path, capsys: Any) -> None:
    """A bad turn id says "must be a UUID v4"; a near-miss type says "did you mean"."""
    bad_uuid = frame("session.turn.start", {"turn_id": "turn-1", "turn_index": 0})
    near_miss = frame("user.mesage", {"text": "hi"})
    text = json.dumps(bad_uuid) + "\n" + json.dumps(near_miss) + "\n"
    code, out, _ = run(tmp_path, capsys, text)
    assert code == 1
    assert "`payload.turn_id` must be a UUID v4" in out[0]
    assert "did you mean 'user.message'?" in out[1]


@pytest.mark.parametrize("where", ["no turn open", "another turn open", "its turn open"])
def test_an_error_on_a_turn_end_that_did_not_fail_is_named_before_turn_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """A turn.end with error but stop_reason end_turn is refused for that, open turn or not."""
    turn_id, other = str(uuid.uuid4()), str(uuid.uuid4())
    error = {"code": "model_overloaded", "message": "overloaded"}
    before = [] if where == "no turn open" else turn_frames(turn_id)[:1]
    ended = other if where == "another turn open" else turn_id
    bad = frame("session.turn.end", {"turn_id": ended, "stop_reason": "end_turn", "error": error})
    for options in ((), ("--sequence",)):
        code, out, _ = run(tmp_path, capsys, jsonl(*before, bad), *options)
        assert code == 1, (options, out)
        assert out[-1].startswith(f"{len(before) + 1} invalid invalid_frame: "), (options, out)
        assert "error is only for stop_reason 'error'" in out[-1], (options, out)


def test_text_output_escapes_what_the_file_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A quoted value with ESC/CR/LF cannot forge an output line or drive the terminal;
    --json keeps the exact message."""
    turn_id = str(uuid.uuid4())
    forged = "\x1b[31mX\r\n2 ok"
    lines = jsonl(
        frame("session.turn.start", {"turn_id": turn_id, "turn_index": 0}),
        frame("session.turn.end", {"turn_id": forged, "stop_reason": "end_turn"}),
    )
    code, out, _ = run(tmp_path, capsys, lines, "--sequence")
    assert code == 1
    assert len(out) == 2, out
    assert out[1].startswith("2 invalid turn_state: turn_id \\x1b[31mX\\x0d\\x0a2 ok is not")
    assert not any(c in "".join(out) for c in "\x1b\r")
    code, out, _ = run(tmp_path, capsys, lines, "--sequence", "--json")
    assert forged in json.loads(out[1])["message"]
