"""``rawp``'s one dialect: each user error is one line on stderr with its exit status, never a
traceback; ``--version``; a subcommand's refusal points at that subcommand's help."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from protocol.version import PROTOCOL_VERSION, VERSION
from rawp.cli import main

REPO = Path(__file__).resolve().parents[2]


def _rawp(*argv: str, **env: str) -> tuple[int, str, str]:
    """``rawp ARGV`` in a process of its own, without the caller's RAWP_* variables."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAWP_")}
    done = subprocess.run(
        [sys.executable, "-m", "rawp.cli", *argv],
        cwd=REPO,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def rawp(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    """``rawp ARGV`` in this process (RAWP_* variables only as given): status, stdout, stderr."""

    def run(*argv: str, **env: str) -> tuple[int, str, str]:
        for name in [k for k in os.environ if k.startswith("RAWP_")]:
            monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's own refusals and -h
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err

    return run


def _one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_version() -> None:
    """``rawp --version`` prints the package and protocol versions and exits 0."""
    code, out, _ = _rawp("--version")
    assert code == 0
    assert out.strip() == f"rawp {VERSION} (RAWP protocol {PROTOCOL_VERSION})"


def test_a_subcommands_unknown_flag_points_at_its_own_help(rawp: Run) -> None:
    """``rawp serve --bogus`` is refused by serve, naming ``rawp serve --help``; exit 2."""
    code, _, err = rawp("serve", "--bogus")
    assert code == 2
    line = _one_line(err)
    assert line == "rawp serve: unrecognized arguments: --bogus (see rawp serve --help)"
    code, _, err = rawp("tokens", "create", "s1", "--bogus")
    assert code == 2
    assert _one_line(err).startswith("rawp tokens create: unrecognized arguments: --bogus")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:8766", "is an HTTP URL; give the master's WebSocket URL"),
        ("https://relay.example/v1/ws", "is an HTTP URL; give the master's WebSocket URL"),
        ("ftp://127.0.0.1/v1/ws", "is not a ws:// or wss:// URL"),
        ("127.0.0.1:8765", "is not a ws:// or wss:// URL"),
        ("ws://127.0.0.1:99999/v1/ws", "is not a URL (Port out of range"),
        ("ws:///v1/ws", "names no host"),
        ("ws://127.0.0.1:8765/v1/ws\x1b[2J", "control character"),
    ],
)
def test_tail_refuses_a_bad_ws_url_in_one_line(url: str, says: str, rawp: Run) -> None:
    """A URL that is not the master's WebSocket URL: one line naming --ws-url, exit 2."""
    code, out, err = rawp("tail", "s1", "--ws-url", url, "--token", "K")
    assert code == 2
    line = _one_line(err)
    assert line.startswith("rawp tail: --ws-url: ")
    assert says in line
    assert line.endswith("(see rawp tail --help)")
    assert out == ""


def test_a_bad_url_in_a_variable_names_the_variable(rawp: Run) -> None:
    """The same check on $RAWP_WS_URL names the variable, not the flag."""
    code, _, err = rawp("tail", "s1", RAWP_WS_URL="http://127.0.0.1:8766", RAWP_API_KEY="K")
    assert code == 2
    assert _one_line(err).startswith("rawp tail: $RAWP_WS_URL: 'http://127.0.0.1:8766' is an")


def test_tail_without_a_credential_names_its_variables(rawp: Run) -> None:
    """No --token and no variable: the line names the flag and both variables it reads."""
    code, _, err = rawp("tail", "s1")
    assert code == 2
    assert _one_line(err) == (
        "rawp tail: needs --token (or $RAWP_TOKEN or $RAWP_API_KEY) (see rawp tail --help)"
    )


def test_conformance_without_its_flags_names_its_variables(rawp: Run) -> None:
    """conformance needs all three: the line lists each with its variable."""
    code, _, err = rawp("conformance")
    assert code == 2
    assert _one_line(err) == (
        "rawp conformance: needs --ws-url (or $RAWP_WS_URL), --http-url (or $RAWP_HTTP_URL), "
        "--token (or $RAWP_API_KEY) (see rawp conformance --help)"
    )


def test_tokens_refuses_a_websocket_url_for_http(rawp: Run) -> None:
    """tokens talks HTTP: a ws:// URL is refused in one line naming --http-url, exit 2."""
    code, _, err = rawp("tokens", "revoke", "t1", "--http-url", "ws://127.0.0.1:8765/v1/ws")
    assert code == 2
    assert "--http-url: 'ws://127.0.0.1:8765/v1/ws' is a WebSocket URL" in _one_line(err)


def test_old_spellings_still_work_hidden(rawp: Run) -> None:
    """--url/--api-key of tokens, $RAWP_URL and --relay-url still reach the shared flags (so
    their values are checked as those are); -h does not show them."""
    code, _, err = rawp("tokens", "revoke", "t1", "--url", "ws://x:1", "--api-key", "K")
    assert code == 2
    assert "rawp tokens revoke: --http-url: 'ws://x:1' is a WebSocket URL" in _one_line(err)
    code, _, err = rawp("tokens", "revoke", "t1", "--api-key", "K", RAWP_URL="ws://x:1/v1/ws")
    assert code == 2
    assert "$RAWP_URL: 'ws://x:1/v1/ws' is a WebSocket URL" in _one_line(err)
    code, _, err = rawp("bridge", "ag-ui", "--agent-url", "http://a", "--session", "s",
                        "--relay-url", "http://127.0.0.1:8766", "--token", "K")  # fmt: skip
    assert code == 2
    assert "is an HTTP URL" in _one_line(err)
    code, out, _ = rawp("tokens", "create", "-h")
    assert code == 0
    assert "--url" not in out.replace("--http-url", "")
    assert "--api-key" not in out


def test_no_traceback_in_a_process_of_its_own() -> None:
    """Run as the installed command would be: the bad URL is one line, exit 2, no traceback."""
    code, out, err = _rawp("tail", "s1", "--ws-url", "http://127.0.0.1:8766", "--token", "K")
    assert code == 2
    assert _one_line(err).startswith("rawp tail: --ws-url: 'http://127.0.0.1:8766' is an HTTP")
    assert out == ""


def test_bridge_refuses_bad_input_in_one_line(rawp: Run) -> None:
    """bridge ag-ui: a bad --agent-url, --agent-header or --run-timeout is one line, exit 2."""
    base = ["bridge", "ag-ui", "--session", "s", "--token", "K"]
    for extra, says in (
        (["--agent-url", "localhost:9000"], "--agent-url wants an http(s):// URL"),
        (["--agent-url", "http://a", "--agent-header", "nocolon"], "NAME:VALUE"),
        (["--agent-url", "http://a", "--run-timeout", "0"], "--run-timeout: 0 is not above 0"),
    ):
        code, _, err = rawp(*base, *extra)
        assert code == 2, err
        assert says in _one_line(err)


def test_schemas_into_an_unwritable_place_is_one_line(rawp: Run, tmp_path: Path) -> None:
    """``rawp schemas --out`` under a regular file: one line naming the place, exit 2."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = rawp("schemas", "--out", str(blocker / "schemas"))
    assert code == 2
    assert _one_line(err).startswith(f"rawp schemas: cannot write {blocker / 'schemas'}: ")


def test_keys_refuses_a_bad_http_url_as_every_command_does(rawp: Run) -> None:
    """``rawp keys`` reads --http-url / $RAWP_HTTP_URL through the shared flags: a URL of the
    wrong kind is the same one line, naming the flag or the variable, exit 2."""
    code, out, err = rawp("keys", "list", "--http-url", "ws://127.0.0.1:8765/v1/ws", "--token", "K")
    assert code == 2
    line = _one_line(err)
    assert line.startswith("rawp keys list: --http-url: 'ws://127.0.0.1:8765/v1/ws' is a WebSocket")
    assert line.endswith("(see rawp keys list --help)")
    assert out == ""
    code, _, err = rawp("keys", "revoke", "0" * 64, RAWP_HTTP_URL="ftp://x", RAWP_API_KEY="K")
    assert code == 2
    assert _one_line(err).startswith("rawp keys revoke: $RAWP_HTTP_URL: 'ftp://x' is not a http://")


def test_keys_reads_its_admin_key_from_rawp_api_key_then_rawp_token(rawp: Run) -> None:
    """The admin key comes from --token, else $RAWP_API_KEY, else $RAWP_TOKEN; none of them is
    the keys command's own failure (exit 8), naming all three."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{s.getsockname()[1]}"
    # $RAWP_API_KEY comes first: the unusable $RAWP_TOKEN is not read.
    code, _, err = rawp("keys", "list", "--http-url", nobody, RAWP_API_KEY="K", RAWP_TOKEN="a b")
    assert code == 4, err
    assert "cannot reach a master" in _one_line(err)
    code, _, err = rawp("keys", "list", "--http-url", nobody, RAWP_TOKEN="a b")
    assert code == 2
    assert _one_line(err).startswith("rawp keys list: $RAWP_TOKEN: a credential holds no spaces")
    code, _, err = rawp("keys", "list", "--http-url", nobody)
    assert code == 8
    assert _one_line(err) == (
        "rawp keys list: an admin API key is needed: --token KEY, or $RAWP_API_KEY or "
        "$RAWP_TOKEN (or use --store)"
    )


def test_keys_on_a_store_reads_no_connection_variable(tmp_path: Path) -> None:
    """With --store the master's URL and key are not asked for: a $RAWP_HTTP_URL set for other
    commands, even an unusable one, does not stop the command."""
    store = f"sqlite:{tmp_path / 'rawp.db'}"
    # In a process of its own: opening a store sets up logging on this process's stderr.
    code, out, err = _rawp("keys", "list", "--store", store, "--json", RAWP_HTTP_URL="ws://x")
    assert code == 0, err
    assert json.loads(out) == {"keys": []}
