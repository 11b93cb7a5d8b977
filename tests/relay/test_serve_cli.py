"""`rawp serve` explains itself: one-line start-up failures with their own exit codes, nothing
half-started, settings from flags / RAWP_* / a TOML file, help with defaults, JSON logs."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import sqlite3
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from protocol.version import VERSION
from relay.cli import announced_urls
from relay.config import OPTIONS, ConfigError, Settings, add_serve_arguments, settings_from_args
from relay.server import Master
from relay.startup import (
    EXIT_BAD_SETTING,
    EXIT_CANNOT_LISTEN,
    EXIT_STORE_REFUSED,
    EXIT_STORE_UNKNOWN,
    EXIT_STORE_UNREACHABLE,
    EXIT_TLS,
    StartupError,
)
from tests.e2e.conftest import test_settings as settings_for_test
from tests.support.mounts import remount, tmpfs

REPO = Path(__file__).resolve().parents[2]
RAWP = [sys.executable, "-m", "rawp.cli"]


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def occupied_port() -> Iterator[int]:
    """A loopback port another socket listens on for the block's duration."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAWP_")}
    # These masters run in the checkout: nothing of theirs may land in its ./rawp-data.
    env["RAWP_STORE"] = "memory"
    env.update(extra)
    return env


async def serve_fails(*args: str, env: dict[str, str] | None = None) -> tuple[int, list[str]]:
    """Run ``rawp serve ARGS`` expecting it to stop by itself; its exit status and stderr."""
    process = await asyncio.create_subprocess_exec(
        *RAWP,
        "serve",
        *args,
        cwd=REPO,
        env=env or _env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _out, err = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, err.decode().splitlines()


# --- start-up failures ------------------------------------------------------------------------


async def test_port_in_use_is_one_line_with_exit_3() -> None:
    """An HTTP port in use: one stderr line naming the port and --http-port, exit 3."""
    with occupied_port() as port:
        code, lines = await serve_fails("--http-port", str(port), "--ws-port", "0")
    assert code == EXIT_CANNOT_LISTEN
    assert len(lines) == 1, lines
    assert f"127.0.0.1:{port}" in lines[0]
    assert "in use" in lines[0]
    assert "--http-port" in lines[0]


async def test_redis_unreachable_is_one_line_with_exit_4() -> None:
    """A Redis URL nobody answers on: one line naming the URL and the fix, exit 4."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    code, lines = await serve_fails("--store", url, "--ws-port", "0", "--http-port", "0")
    assert code == EXIT_STORE_UNREACHABLE
    assert len(lines) == 1, lines
    assert url in lines[0]
    assert "--store" in lines[0]


async def test_unknown_store_scheme_is_one_line_with_exit_5() -> None:
    """A store URL of no known scheme: one line, exit 5."""
    code, lines = await serve_fails("--store", "mongo://x", "--ws-port", "0", "--http-port", "0")
    assert code == EXIT_STORE_UNKNOWN
    assert len(lines) == 1, lines
    assert "mongo://x" in lines[0]
    assert "--store" in lines[0]


async def test_missing_tls_file_is_one_line_with_exit_6(tmp_path: Path) -> None:
    """A --tls-cert that does not exist: one line naming the file and the flag, exit 6."""
    missing = tmp_path / "nope.pem"
    code, lines = await serve_fails(
        "--tls-cert", str(missing), "--ws-port", "0", "--http-port", "0"
    )
    assert code == EXIT_TLS
    assert len(lines) == 1, lines
    assert str(missing) in lines[0]
    assert "--tls-cert" in lines[0]


async def test_a_missing_tls_key_is_named(tmp_path: Path) -> None:
    """The certificate exists, its key does not: the line names the key and --tls-key."""
    import trustme

    cert = trustme.CA().issue_cert("127.0.0.1")
    cert_file = tmp_path / "cert.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    missing = tmp_path / "key.pem"
    code, lines = await serve_fails(
        "--tls-cert", str(cert_file), "--tls-key", str(missing), "--ws-port", "0",
        "--http-port", "0",
    )  # fmt: skip
    assert code == EXIT_TLS
    assert len(lines) == 1, lines
    assert str(missing) in lines[0]
    assert "--tls-key" in lines[0]


async def test_a_second_master_on_another_name_of_its_file_exits_7(tmp_path: Path) -> None:
    """A master owns data/rawp.db; rawp serve on a symlink or a hard link to that file is
    refused in one line naming the owner's pid, exit 7 (before, it started, and both masters
    appended their own seqs to one log)."""
    database = tmp_path / "data" / "rawp.db"
    ports = ("--ws-port", "0", "--http-port", "0")
    async with running_serve("--store", f"sqlite:{database}", *ports, env=_env()) as owner:
        await _line(owner.stdout, "RAWP master:")
        symlink, hard_link = tmp_path / "symlink.db", tmp_path / "hard-link.db"
        symlink.symlink_to(database)
        os.link(database, hard_link)
        for alias in (symlink, hard_link):
            code, lines = await serve_fails("--store", f"sqlite:{alias}", *ports)
            assert code == EXIT_STORE_REFUSED, lines
            assert len(lines) == 1, lines
            assert "in use by another rawp process" in lines[0]
            assert f"pid {owner.pid}" in lines[0]


async def test_a_foreign_sqlite_file_exits_7_and_is_left_as_it_was(tmp_path: Path) -> None:
    """An SQLite file with user_version 7 and no tables is another program's: one line,
    exit 7, the file unchanged and nothing created beside it (before, it was taken over)."""
    theirs = tmp_path / "theirs.db"
    with contextlib.closing(sqlite3.connect(theirs)) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA user_version = 7")
        db.commit()
    content = theirs.read_bytes()
    code, lines = await serve_fails(
        "--store", f"sqlite:{theirs}", "--ws-port", "0", "--http-port", "0"
    )
    assert code == EXIT_STORE_REFUSED
    assert len(lines) == 1, lines
    assert "not a RAWP database" in lines[0]
    assert theirs.read_bytes() == content
    assert os.listdir(tmp_path) == ["theirs.db"]


@pytest.mark.parametrize("existing", [True, False])
async def test_a_read_only_file_system_exits_7(tmp_path: Path, existing: bool) -> None:
    """A store on a read-only mount: one line saying so, exit 7 as documented (before, the
    lock file could not be created and it exited 4 "cannot reach the store … redis-server")."""
    with tmpfs(tmp_path / "ro", size="8m") as mount:
        database = mount / "rawp.db"
        if existing:
            with contextlib.closing(sqlite3.connect(database)) as db:
                db.execute("PRAGMA journal_mode = DELETE")
                db.commit()
        remount(mount, read_only=True)
        code, lines = await serve_fails(
            "--store", f"sqlite:{database}", "--ws-port", "0", "--http-port", "0"
        )
    assert code == EXIT_STORE_REFUSED, lines
    assert len(lines) == 1, lines
    assert "read-only file system" in lines[0]
    assert "redis" not in lines[0]


def test_a_store_password_is_not_shown() -> None:
    """The unreachable-store line hides the password of the store URL."""
    from relay.startup import store_unreachable

    line = store_unreachable("redis://:s3cret@127.0.0.1:1/0", OSError("refused")).message
    assert "s3cret" not in line
    assert "redis://***@127.0.0.1:1/0" in line


async def test_invalid_values_are_refused_clearly() -> None:
    """--log-level verbose and RAWP_LOG_LEVEL=verbose are refused with exit 2, in one line
    naming it (a flag's refusal too: no usage dump)."""
    code, lines = await serve_fails("--log-level", "verbose")
    assert code == EXIT_BAD_SETTING
    assert len(lines) == 1, lines
    assert "'verbose' is not one of debug, info, warning, error, critical" in lines[0]
    assert lines[0].startswith("rawp serve: ")
    assert lines[0].endswith("(see rawp serve --help)")
    code, lines = await serve_fails(env=_env(RAWP_LOG_LEVEL="verbose"))
    assert code == EXIT_BAD_SETTING
    assert len(lines) == 1, lines
    assert lines[0].startswith("rawp serve: RAWP_LOG_LEVEL='verbose'")


async def test_a_failed_start_leaves_nothing_listening() -> None:
    """WebSocket port in use after HTTP started: start() closes HTTP again before raising."""
    with occupied_port() as port:
        master = Master(settings_for_test(ws_port=port, http_port=0))
        with pytest.raises(StartupError) as failed:
            await master.start()
    assert failed.value.exit_code == EXIT_CANNOT_LISTEN
    assert "--ws-port" in failed.value.message
    assert master.http_port != 0  # it had started listening for HTTP …
    with pytest.raises(ConnectionRefusedError):  # … and stopped again
        await asyncio.open_connection("127.0.0.1", master.http_port)


# --- settings: flags > env > file > defaults -------------------------------------------------


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return parser.parse_args(argv)


def test_flags_beat_env_beat_file_beat_defaults(tmp_path: Path) -> None:
    """Each setting comes from the first of flag, RAWP_* variable, TOML file, default."""
    config = tmp_path / "rawp.toml"
    config.write_text(
        'ws_port = 9001\nhttp_port = 9002\nhost = "::1"\nlog_level = "debug"\n'
        'api_key = ["team:rk_file"]\nreattach_window = 30\n'
    )
    env = {"RAWP_HTTP_PORT": "9102", "RAWP_HOST": "127.0.0.2", "RAWP_CONFIG": str(config)}
    settings = settings_from_args(_parse(["--host", "0.0.0.0"]), environ=env)
    assert settings.host == "0.0.0.0"  # flag
    assert settings.http_port == 9102  # env over file
    assert settings.ws_port == 9001  # file
    assert settings.log_level == "debug"
    assert settings.api_keys == ("team:rk_file",)
    assert settings.reattach_window_s == 30.0
    assert settings.max_frame_bytes == Settings().max_frame_bytes  # default
    # --config on the command line, and a repeated list flag replacing the file's list
    args = _parse(["--config", str(config), "--api-key", "a:1", "--api-key", "b:2"])
    assert settings_from_args(args, environ={}).api_keys == ("a:1", "b:2")


def test_a_key_without_its_certificate_is_refused() -> None:
    """--tls-key alone would be ignored silently: it is refused instead."""
    with pytest.raises(ConfigError, match="--tls-key needs --tls-cert"):
        settings_from_args(_parse(["--tls-key", "k.pem"]), environ={})


def test_bad_values_and_unknown_file_keys_name_their_source(tmp_path: Path) -> None:
    """A value that does not parse, or a key the file may not hold, says where it was."""
    with pytest.raises(ConfigError, match=r"RAWP_WS_PORT='70000': a port is 0"):
        settings_from_args(_parse([]), environ={"RAWP_WS_PORT": "70000"})
    config = tmp_path / "bad.toml"
    config.write_text("ws_prot = 1\n")
    with pytest.raises(ConfigError, match=r"unknown setting.*ws_prot"):
        settings_from_args(_parse(["--config", str(config)]), environ={})
    config.write_text("ws_port = 'many'\n")
    with pytest.raises(ConfigError, match=r"bad.toml: ws_port = 'many': a whole number"):
        settings_from_args(_parse(["--config", str(config)]), environ={})
    with pytest.raises(ConfigError, match="no such file"):
        settings_from_args(_parse(["--config", str(tmp_path / "none.toml")]), environ={})


@pytest.mark.parametrize(
    ("key", "toml", "text"),
    [
        ("reattach_window", "inf", "inf"),
        ("reattach_window", "nan", "nan"),
        ("reattach_window", "1e300", "1e300"),
        ("archive_retention", '"inf"', "inf"),
        ("archive_retention", '"99999d"', "99999d"),
        ("hello_timeout", "inf", "inf"),
        ("heartbeat_interval", "-inf", "-inf"),
        ("rate_frames", "inf", "inf"),
        ("rate_bytes", "nan", "nan"),
        ("max_frame_bytes", "1" + "0" * 30, "1" + "0" * 30),
        ("retention", "1" + "0" * 30, "1" + "0" * 30),
        ("node_dead_after", "inf", "inf"),
    ],
)
def test_infinite_and_absurd_values_are_refused_from_every_source(
    tmp_path: Path, key: str, toml: str, text: str
) -> None:
    """inf, nan and values past a setting's bound are refused from the flag, the variable
    and the file alike, naming where they came from (none starts a master that then fails)."""
    option = next(o for o in OPTIONS if o.key == key)
    with pytest.raises(SystemExit):  # argparse refuses the flag (rawp prints one line)
        _parse([option.flag, text])
    with pytest.raises(ConfigError, match=rf"{option.env}={text!r}: .*is needed"):
        settings_from_args(_parse([]), environ={option.env: text})
    config = tmp_path / "rawp.toml"
    config.write_text(f"[serve]\n{key} = {toml}\n")
    with pytest.raises(ConfigError, match=rf"rawp.toml: {key} = .*is needed"):
        settings_from_args(_parse(["--config", str(config)]), environ={})


def test_the_bounds_themselves_are_accepted() -> None:
    """Each bound is a value that works: 30 days of reattach window, ten years of retention."""
    env = {"RAWP_REATTACH_WINDOW": "2592000", "RAWP_ARCHIVE_RETENTION": "3650d"}
    settings = settings_from_args(_parse([]), environ=env)
    assert settings.reattach_window_s == 30 * 86400
    assert settings.archive_retention_s == 3650 * 86400


async def test_an_infinite_window_is_refused_at_start_with_exit_2(tmp_path: Path) -> None:
    """reattach_window = inf in the file, or RAWP_ARCHIVE_RETENTION=inf: one line, exit 2
    (before, the master started and closed every hello 1011, or its purge task died)."""
    config = tmp_path / "rawp.toml"
    config.write_text("[serve]\nreattach_window = inf\n")
    code, lines = await serve_fails("--config", str(config), "--ws-port", "0", "--http-port", "0")
    assert code == EXIT_BAD_SETTING
    assert len(lines) == 1, lines
    assert "reattach_window = inf" in lines[0]
    code, lines = await serve_fails(
        "--ws-port", "0", "--http-port", "0", env=_env(RAWP_ARCHIVE_RETENTION="inf")
    )
    assert code == EXIT_BAD_SETTING
    assert len(lines) == 1, lines
    assert "RAWP_ARCHIVE_RETENTION='inf'" in lines[0]
    code, lines = await serve_fails("--reattach-window", "inf", "--ws-port", "0")
    assert code == EXIT_BAD_SETTING
    assert len(lines) == 1, lines
    assert "--reattach-window" in lines[0]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("ws_port = 9000\n[serve]\nhttp_port = 9001\n", "ws_port beside [serve]"),
        ("[serve]\nws_port = 9000\n[server]\nhttp_port = 9001\n", "server beside [serve]"),
        ('serve = "yes"\n', "serve must be a table"),
        ("[serve]\nws_prot = 9000\n", "unknown setting(s) ws_prot"),
        ("[servr]\nws_port = 9000\n", "unknown setting(s) servr"),
    ],
)
def test_a_setting_the_file_would_ignore_is_refused_by_name(
    tmp_path: Path, text: str, named: str
) -> None:
    """A key beside [serve], a section of another name or a misspelt key is refused, naming
    it, instead of being read by nobody."""
    config = tmp_path / "rawp.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as refused:
        settings_from_args(_parse(["--config", str(config)]), environ={})
    assert named in str(refused.value)
    assert "\n" not in str(refused.value)


def test_one_key_for_two_workspaces_is_refused() -> None:
    """The same secret given for two workspaces (flags, variable or file) is refused, naming
    both workspaces and never the secret; the same key twice for one workspace is fine."""
    args = _parse(["--api-key", "team-a:rk_same", "--api-key", "team-b:rk_same"])
    with pytest.raises(ConfigError, match="two workspaces \\(team-a and team-b\\)") as refused:
        settings_from_args(args, environ={})
    assert "rk_same" not in str(refused.value)
    with pytest.raises(ConfigError, match="two workspaces \\(default and team-b\\)"):
        settings_from_args(_parse([]), environ={"RAWP_API_KEY": "rk_same,team-b:rk_same"})
    again = _parse(["--api-key", "team-a:rk_same", "--api-key", "team-a:rk_same"])
    assert settings_from_args(again, environ={}).api_keys == ("team-a:rk_same",) * 2


async def test_one_key_for_two_workspaces_stops_the_start_with_exit_2() -> None:
    """rawp serve with one key for two workspaces: one line, exit 2, nothing started."""
    code, lines = await serve_fails(
        "--api-key", "a:rk_twice", "--api-key", "b:rk_twice", "--ws-port", "0", "--http-port", "0"
    )
    assert code == EXIT_BAD_SETTING
    assert len(lines) == 1, lines
    assert "two workspaces (a and b)" in lines[0]


def test_every_flag_has_help_with_its_default() -> None:
    """rawp serve -h: each visible option explains itself, shows its default and its variable."""
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    shown = {a.dest: a for a in parser._actions if a.help != argparse.SUPPRESS}
    for option in OPTIONS:
        if option.hidden:
            continue
        action = shown[option.dest]
        assert action.help, option.flag
        assert "(default: " in action.help, option.flag
        assert option.env in action.help, option.flag


# --- a running master: dashboard link, JSON logs, env ---------------------------------------


@contextlib.asynccontextmanager
async def running_serve(
    *args: str, env: dict[str, str]
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``rawp serve ARGS`` until the block ends (then SIGTERM, and wait)."""
    process = await asyncio.create_subprocess_exec(
        *RAWP,
        "serve",
        *args,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 20)
            except TimeoutError:
                process.kill()
                await process.wait()


async def _line(stream: asyncio.StreamReader | None, prefix: str) -> str:
    assert stream is not None
    async with asyncio.timeout(30):
        while True:
            line = (await stream.readline()).decode()
            assert line, f"the master ended before printing {prefix!r}"
            if line.startswith(prefix):
                return line.strip()


async def test_serve_prints_a_ready_dashboard_link_and_takes_env_ports() -> None:
    """The dev key's dashboard link opens the dashboard signed in; ports come from RAWP_*."""
    port = free_port()
    env = _env(RAWP_HTTP_PORT=str(port), RAWP_WS_PORT="0")
    async with running_serve(env=env) as process:
        link = await _line(process.stdout, "dashboard: ")
        assert link.startswith(f"dashboard: http://127.0.0.1:{port}/?token=rk_")
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.0\r\n\r\n")
        await writer.drain()
        status = await reader.readline()
        writer.close()
        assert b" 200 " in status


async def test_json_mode_logs_only_json_lines(tmp_path: Path) -> None:
    """With --log-format json every line on stdout and stderr together parses as JSON —
    stdlib loggers' and the start-up announcement (one ``listening`` event on stdout)."""
    async with running_serve(
        "--log-format", "json", "--ws-port", "0", "--http-port", "0", env=_env()
    ) as process:
        assert process.stdout is not None
        async with asyncio.timeout(30):
            first = await process.stdout.readline()
        announced = announced_urls(first.decode())
        assert announced is not None, first
        ws_port = int(announced[0].split("ws://127.0.0.1:")[1].split("/")[0])
        # a bare TCP connection that is no WebSocket makes the websockets library log
        _reader, writer = await asyncio.open_connection("127.0.0.1", ws_port)
        writer.write(b"GET /v1/ws HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.close()
    assert process.stderr is not None
    out = [first.decode(), *(await process.stdout.read()).decode().splitlines()]
    err = (await process.stderr.read()).decode().splitlines()
    assert err, "a JSON-mode master logs its start and stop"
    events = [json.loads(line) for line in out + err]  # raises on any line that is not JSON
    assert any(e.get("event") == "dev_api_key" for e in events)
    (listening,) = [json.loads(line) for line in out if json.loads(line)["event"] == "listening"]
    assert listening["ws"] == announced[0]
    assert listening["http"].startswith("http://127.0.0.1:")
    assert listening["dashboard"].startswith(listening["http"] + "/?token=rk_")
    assert listening["version"] == VERSION


async def test_console_mode_announces_in_plain_text() -> None:
    """The default format keeps the two plain start-up lines on stdout."""
    async with running_serve("--ws-port", "0", "--http-port", "0", env=_env()) as process:
        line = await _line(process.stdout, "RAWP master: ")
        assert announced_urls(line) is not None
        assert (await _line(process.stdout, "dashboard: ")).startswith("dashboard: http://")


async def test_stdlib_loggers_go_through_structlog_as_json() -> None:
    """A stdlib logger's warning becomes one JSON object with its logger's name and level
    (in a process of its own: logging is configured once per process)."""
    program = (
        "import logging\n"
        "from relay.logs import configure_logging\n"
        "configure_logging('json', 'info')\n"
        "logging.getLogger('websockets.server').warning('handshake failed: %s', 'bad request')\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", program, cwd=REPO, stderr=asyncio.subprocess.PIPE
    )
    _out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    (line,) = err.decode().splitlines()
    record = json.loads(line)
    assert record["event"] == "handshake failed: bad request"
    assert record["level"] == "warning"
    assert record["logger"] == "websockets.server"
