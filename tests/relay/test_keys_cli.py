"""``rawp keys create|list|revoke`` against a running master (SQLite, Redis) and a store.

Every failure is one line on stderr and a documented exit status (docs/operations.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.auth import digest
from relay.credentials_cli import (
    EXIT_KEYS_CREDENTIAL,
    EXIT_KEYS_REFUSED,
    EXIT_KEYS_UNREACHABLE,
    EXIT_KEYS_USAGE,
)
from tests.support.redis_server import RedisServer

REPO = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAWP_")}
    return {**env, **extra}


def _keys(*args: str, **env: str) -> tuple[int, list[str], str]:
    """``rawp keys ARGS`` in its own process: exit status, stderr lines, stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "rawp.cli", "keys", *args],
        cwd=REPO,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stderr.splitlines(), done.stdout


@contextlib.contextmanager
def _serve(store: str, *extra: str) -> Iterator[tuple[str, str | None]]:
    """A ``rawp serve`` process: (its HTTP URL, the development key it printed, if any)."""
    serve = subprocess.Popen(
        [sys.executable, "-m", "rawp.cli", "serve", "--store", store, "--host", "127.0.0.1",
         "--ws-port", "0", "--http-port", "0", *extra],
        cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert serve.stdout is not None
        deadline = time.monotonic() + 60
        line = ""
        while not line.startswith("RAWP master:"):
            line = serve.stdout.readline()
            assert serve.poll() is None, "the master exited"
            assert time.monotonic() < deadline, "the master did not start"
        http_url = line.split("http ", 1)[1].strip()
        dashboard = serve.stdout.readline()
        dev = dashboard.split("?token=", 1)[1].strip() if "?token=" in dashboard else None
        yield http_url, dev
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(30)


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A durable store for a master of its own."""
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'rawp.db'}"
    server: RedisServer = request.getfixturevalue("redis_server")
    with contextlib.closing(server.client()) as c:
        c.flushall()
    return server.url


@pytest.mark.timeout(180)
def test_keys_against_a_running_master(store_url: str) -> None:
    """create (secret on stdout), list (no secret), revoke; the key works, then does not."""
    with _serve(store_url) as (url, dev):
        assert dev is not None
        admin = {"RAWP_HTTP_URL": url, "RAWP_API_KEY": dev}
        code, err, out = _keys(
            "create", "--scope", "read", "--name", "ci", "--ttl", "3600", **admin
        )
        assert code == 0, err
        key = out.strip()
        assert key.startswith("rk_")
        assert digest(key) in err[0]
        code, err, out = _keys("list", "--json", **admin)
        assert code == 0, err
        keys = {k["key_id"]: k for k in json.loads(out)["keys"]}
        assert keys[digest(key)]["scopes"] == ["read"]
        assert keys[digest(key)]["name"] == "ci"
        assert keys[digest(key)]["expires_at"] is not None
        assert keys[digest(dev)]["development"] is True
        assert key not in out
        assert dev not in out
        code, err, table = _keys("list", "--http-url", url, "--token", dev)
        assert code == 0, err
        assert digest(key)[:16] in table
        # A read-only key may not manage keys: 403 is the credential's exit status.
        code, err, _ = _keys("list", "--http-url", url, "--token", key)
        assert code == EXIT_KEYS_CREDENTIAL
        assert len(err) == 1
        assert "admin" in err[0]
        code, err, _ = _keys("revoke", digest(key), **admin)
        assert code == 0, err
        code, err, _ = _keys("list", "--http-url", url, "--token", key)
        assert code == EXIT_KEYS_CREDENTIAL  # now unknown: 401
        # The development key cannot revoke itself.
        code, err, _ = _keys("revoke", dev, **admin)
        assert code == EXIT_KEYS_REFUSED
        assert len(err) == 1
        assert "itself" in err[0]
    # The next start prints the same development key (made once per store).
    with _serve(store_url) as (_, again):
        assert again == dev


@pytest.mark.timeout(120)
def test_every_failure_is_one_line_with_its_exit_status(tmp_path: Path) -> None:
    """Unknown scope, past expiry, no admin key, no master, bad URL: one line each."""
    store = f"sqlite:{tmp_path / 'rawp.db'}"
    with _serve(store) as (url, dev):
        assert dev is not None
        admin = {"RAWP_HTTP_URL": url, "RAWP_API_KEY": dev}
        cases = [
            (("create", "--scope", "sudo"), admin, EXIT_KEYS_REFUSED, "sudo"),
            (("create", "--expires-at", "2001-01-01T00:00:00Z"), admin, EXIT_KEYS_REFUSED, "past"),
            (("create", "--expires-at", "tomorrow"), admin, EXIT_KEYS_USAGE, "RFC 3339"),
            (
                ("create", "--ttl", "5", "--expires-at", "2099-01-01T00:00:00Z"),
                admin,
                2,
                "not both",
            ),
            (("create",), {"RAWP_HTTP_URL": url}, EXIT_KEYS_CREDENTIAL, "--token"),
            (("create",), {"RAWP_HTTP_URL": url, "RAWP_API_KEY": "rk_nope"}, 8, "401"),
            (("revoke", "0" * 64), admin, EXIT_KEYS_REFUSED, "no API key"),
            (("list", "--http-url", "ftp://x"), admin, EXIT_KEYS_USAGE, "--http-url: 'ftp://x'"),
            (("list", "--store", store), {}, 7, str(tmp_path / "rawp.db")),  # the master owns it
        ]
        for args, env, code, needle in cases:
            got, err, out = _keys(*args, **env)
            assert got == code, (args, got, err)
            assert len(err) == 1, (args, err)
            assert needle in err[0], (args, err)
            assert out == "", (args, out)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    got, err, _ = _keys("list", "--http-url", f"http://127.0.0.1:{free}", "--token", "rk_x")
    assert got == EXIT_KEYS_UNREACHABLE
    assert len(err) == 1
    assert "cannot reach" in err[0]


@pytest.mark.timeout(120)
def test_keys_on_a_store_no_master_owns(tmp_path: Path) -> None:
    """With --store: create, list and revoke in the file; the master then honours them."""
    store = f"sqlite:{tmp_path / 'rawp.db'}"
    code, err, out = _keys("create", "--store", store, "--scope", "admin", "--scope", "read")
    assert code == 0, err
    key = out.strip()
    code, err, out = _keys("list", "--store", store, "--json")
    assert code == 0, err
    assert [k["scopes"] for k in json.loads(out)["keys"]] == [["admin", "read"]]
    with _serve(store, "--api-key", "rk_operator") as (url, dev):
        assert dev is None  # a key is given: no development key
        code, err, out = _keys("list", "--http-url", url, "--token", key, "--json")
        assert code == 0, err
        assert digest(key) in out
    code, err, _ = _keys("revoke", key, "--store", store)
    assert code == 0, err
    code, err, out = _keys("list", "--store", store, "--json")
    assert json.loads(out)["keys"] == []


def test_every_option_says_its_default_and_variable() -> None:
    """--help of each keys action names the defaults and RAWP_HTTP_URL / RAWP_API_KEY."""
    for action in ("create", "list", "revoke"):
        done = subprocess.run(
            [sys.executable, "-m", "rawp.cli", "keys", action, "--help"],
            cwd=REPO, env=_env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        text = " ".join(done.stdout.split())
        assert "RAWP_HTTP_URL" in text
        assert "RAWP_API_KEY" in text
        assert "--http-url" in text
        assert "--token" in text
        assert text.count("default") >= 4


_CONTROLS = ("\x1b", "\r", "\x07", "\x9b", "\u2028")


@pytest.mark.timeout(120)
def test_the_keys_table_escapes_what_a_keys_creator_chose(tmp_path: Path) -> None:
    """A key's name and workspace with ESC/CR/BEL are escaped in the table, exact in --json."""
    store = f"sqlite:{tmp_path / 'rawp.db'}"
    name = "ci\x1b]0;pwned\x07\r\nFAKE ROW\x9b2J\u2028"
    workspace = "ws\x1b[2J"
    code, err, _ = _keys(
        "create", "--store", store, "--scope", "read", "--name", name, "--workspace", workspace
    )
    assert code == 0, err
    for line in err:
        assert not any(c in line for c in _CONTROLS), line
    code, err, table = _keys("list", "--store", store)
    assert code == 0, err
    assert not any(c in table for c in _CONTROLS), table
    rows = table.splitlines()
    assert len(rows) == 2, rows  # the header and one key: no row forged by CR/LF
    assert "ci\\x1b]0;pwned\\x07\\x0d\\x0aFAKE ROW\\x9b2J\\u2028" in rows[1]
    assert "ws\\x1b[2J"[:12] in rows[1]
    code, err, out = _keys("list", "--store", store, "--json")
    assert code == 0, err
    [listed] = json.loads(out)["keys"]
    assert (listed["name"], listed["workspace"]) == (name, workspace)
