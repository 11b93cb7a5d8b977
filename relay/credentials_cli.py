"""``rawp keys create|list|revoke`` and ``rawp tokens create|revoke``: credentials from the shell.

* API keys are managed on a running master over HTTP (``--http-url`` / ``RAWP_HTTP_URL``,
  with an ``admin`` key: ``--token`` / ``RAWP_API_KEY`` or ``RAWP_TOKEN``; the connection
  flags of every command, :mod:`protocol.cli_flags`), or with ``--store`` on a store no
  master owns (a SQLite file, or Redis); ``--store memory`` only prints a fresh secret for
  ``--api-key``. The secret of a new key is printed once on stdout; every failure is one
  line on stderr and an ``EXIT_KEYS_*`` status (docs/operations.md, "API keys").
* Session tokens are issued and revoked by a running master over HTTP (``--http-url`` or
  ``RAWP_HTTP_URL``), with an API key (``--token`` or ``RAWP_API_KEY``; the connection flags
  of every command, :mod:`protocol.cli_flags`): ``rawp tokens create SESSION_ID [--grant
  client] [--grant delete] [--ttl SECONDS]`` prints the token (shown once) on stdout;
  ``rawp tokens revoke TOKEN_ID`` revokes it.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from protocol import names
from protocol.cli_flags import LOCAL_HTTP_URL, add_connection_flags, connection
from protocol.errors import StoreError

from .auth import (
    DEFAULT_KEY_SCOPES,
    DEFAULT_TOKEN_TTL_S,
    GRANTS,
    MAX_TOKEN_TTL_S,
    SCOPES,
    Authenticator,
    KeyRefused,
    digest,
    new_api_key,
    scopes_of,
)
from .store.base import Credential, Store

T = TypeVar("T")

__all__ = [
    "EXIT_KEYS_CREDENTIAL",
    "EXIT_KEYS_REFUSED",
    "EXIT_KEYS_UNREACHABLE",
    "EXIT_KEYS_USAGE",
    "add_key_commands",
    "add_token_commands",
]

EXIT_KEYS_REFUSED = 1
"""The master or store refused: unknown scope, past expiry, no such key, own or last admin key."""
EXIT_KEYS_USAGE = 2
"""The command line itself (argparse's status too)."""
EXIT_KEYS_UNREACHABLE = 4
"""No master answered at --http-url (or it failed, 5xx); with --store: the store (as serve)."""
EXIT_KEYS_CREDENTIAL = 8
"""No admin key given, or the master refused it (401, 403: unknown, expired, not admin)."""


def add_key_commands(keys_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``rawp keys create|list|revoke``."""
    create = keys_sub.add_parser(
        "create", help="create an API key (its secret printed once, on stdout)"
    )
    create.add_argument(
        "--workspace",
        default=None,
        help="the key's workspace (default: the admin key's over HTTP; 'default' with --store)",
    )
    create.add_argument(
        "--scope",
        action="append",
        default=None,
        metavar="SCOPE",
        help=f"a scope, repeatable: {', '.join(sorted(SCOPES))} (default: read, write, delete, "
        "tokens — every scope but admin)",
    )
    create.add_argument(
        "--expires-at", default=None, metavar="TIME", help="RFC 3339 expiry (default: never)"
    )
    create.add_argument(
        "--ttl",
        type=float,
        default=None,
        metavar="SECONDS",
        help="expire this long from now (default: never; not with --expires-at)",
    )
    create.add_argument("--name", default="", help="a label shown by `keys list` (default: none)")
    _connection_options(create)
    create.set_defaults(handler=_keys_create)

    listing = keys_sub.add_parser("list", help="list the live API keys (never their secrets)")
    listing.add_argument("--json", action="store_true", help="one JSON document (default: a table)")
    _connection_options(listing)
    listing.set_defaults(handler=_keys_list)

    revoke = keys_sub.add_parser("revoke", help="revoke an API key")
    revoke.add_argument(
        "key", metavar="KEY_OR_ID", help="the key, or its id: SHA-256 hex (required)"
    )
    _connection_options(revoke)
    revoke.set_defaults(handler=_keys_revoke)


def _connection_options(parser: argparse.ArgumentParser) -> None:
    """Where the keys live: a running master over HTTP (the shared connection flags, read only
    when asked), or a store no master owns (``--store``)."""
    add_connection_flags(
        parser,
        http=LOCAL_HTTP_URL,
        token="an API key with the admin scope; needed unless --store is given",
        token_env=("RAWP_API_KEY", "RAWP_TOKEN"),
        token_required=False,
    )
    parser.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="work on this store instead of a master: sqlite:PATH no master owns, redis://…, "
        "or memory to just print a new key for --api-key (default: none, ask the master; "
        "RAWP_STORE is serve's, not read here)",
    )
    parser.add_argument(
        "--redis-cluster",
        action="store_true",
        help="the --store URL is a Redis Cluster (default: off)",
    )


def add_token_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``rawp tokens create|revoke``."""
    tokens = sub.add_parser("tokens", help="issue and revoke session tokens (over HTTP)")
    tokens_sub = tokens.add_subparsers(dest="tokens_command", required=True, metavar="ACTION")

    def common(p: argparse.ArgumentParser) -> None:
        add_connection_flags(
            p,
            http=LOCAL_HTTP_URL,
            token="an API key of the session's workspace",
            token_env=("RAWP_API_KEY",),
            old_flags={"--url": "http_url", "--api-key": "token"},
            old_env={"http_url": ("RAWP_URL",)},
        )

    create = tokens_sub.add_parser(
        "create",
        help="issue a session token (shown once)",
        description="Ask a running master for a token scoped to one session. A token may "
        "attach as an edge, read the session and append user input; grants add more. The "
        "token is printed once on stdout; its id, for revoking it, on stderr.",
    )
    create.add_argument("session_id", metavar="SESSION", help="the session id (required)")
    create.add_argument(
        "--grant",
        action="append",
        choices=sorted(GRANTS),
        default=[],
        help="a right beyond an edge's: client (attach as the agent), delete (end the "
        "session); repeat for both (default: none)",
    )
    create.add_argument(
        "--ttl",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"how long the token is valid, at most {MAX_TOKEN_TTL_S:.0f} (30 days) "
        f"(default: {DEFAULT_TOKEN_TTL_S:.0f}, a day)",
    )
    common(create)
    create.set_defaults(handler=_tokens_create)

    revoke = tokens_sub.add_parser(
        "revoke", help="revoke a session token by its id", description="Revoke a session token."
    )
    revoke.add_argument(
        "token_id", metavar="TOKEN_ID", help="the token's id, printed when it was issued (required)"
    )
    common(revoke)
    revoke.set_defaults(handler=_tokens_revoke)


def _with_store(args: argparse.Namespace, action: Callable[[Store], Awaitable[T]]) -> T:
    """Run ``action`` against the store named by ``--store`` / ``--redis-cluster``.

    A store that cannot be opened — a SQLite file a running master owns, an unreachable
    Redis, an unknown URL — ends the command with one line and the exit status ``rawp
    serve`` would give (docs/operations.md), not a traceback.
    """
    from .startup import StartupError, store_start_failed, store_unknown
    from .store import open_store

    async def run() -> T:
        try:
            store = open_store(args.store, cluster=args.redis_cluster)
        except ValueError as exc:
            raise store_unknown(exc) from exc
        try:
            await store.start()
        except (StoreError, OSError) as exc:
            raise store_start_failed(args.store, exc) from exc
        try:
            return await action(store)
        finally:
            await store.close()

    try:
        return asyncio.run(run())
    except StartupError as exc:
        print(f"rawp keys {args.keys_command}: {exc.message}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None


class _Failed(Exception):
    """One line for stderr and the exit status (docs/operations.md, "rawp keys")."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def _run_keys(args: argparse.Namespace, action: Callable[[], int]) -> int:
    try:
        return action()
    except _Failed as exc:
        print(f"rawp keys {args.keys_command}: {exc.message}", file=sys.stderr)
        return exc.exit_code


def _admin_call(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    """One request to the master with the admin key; failures become :class:`_Failed`."""
    where = connection(args)  # a bad URL or key: the shared one-line usage error, status 2
    url, key = where.http_url.rstrip("/"), where.token
    if not key:
        raise _Failed(
            "an admin API key is needed: --token KEY, or $RAWP_API_KEY or $RAWP_TOKEN "
            "(or use --store)",
            EXIT_KEYS_CREDENTIAL,
        )
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url + path,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        try:
            problem = json.loads(exc.read())
            detail = problem.get("detail", exc.reason)
        except (ValueError, AttributeError):
            detail = exc.reason
        detail = _cell(detail)  # one line and no terminal escapes, whatever the master said
        status = exc.code
        code = EXIT_KEYS_CREDENTIAL if status in (401, 403) else EXIT_KEYS_REFUSED
        if status >= 500:
            code = EXIT_KEYS_UNREACHABLE
        raise _Failed(f"the master at {url} answered {status}: {detail}", code) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise _Failed(
            f"cannot reach a master at {url} ({reason}): start one, set --http-url or "
            "RAWP_HTTP_URL, or use --store",
            EXIT_KEYS_UNREACHABLE,
        ) from None
    except ValueError:
        raise _Failed(f"{url} did not answer JSON: is it a RAWP master?", EXIT_KEYS_UNREACHABLE)


def _expiry_ms(args: argparse.Namespace) -> int | None:
    if args.expires_at is not None and args.ttl is not None:
        raise _Failed("give --expires-at or --ttl, not both", EXIT_KEYS_USAGE)
    if args.ttl is not None:
        if not 0 < args.ttl < 100 * 365 * 86400:
            raise _Failed("--ttl must be a positive number of seconds", EXIT_KEYS_USAGE)
        return int((time.time() + args.ttl) * 1000)
    if args.expires_at is None:
        return None
    try:
        moment = dt.datetime.fromisoformat(args.expires_at.replace("Z", "+00:00"))
    except ValueError:
        raise _Failed(
            f"--expires-at {args.expires_at!r} is not an RFC 3339 time", EXIT_KEYS_USAGE
        ) from None
    if moment.tzinfo is None:
        raise _Failed("--expires-at needs a time zone (e.g. Z)", EXIT_KEYS_USAGE)
    return int(moment.timestamp() * 1000)


def _cell(value: object) -> str:
    """A received value as terminal text: control characters written as escapes."""
    return names.one_line(str(value))


def _time(ms: int | None) -> str | None:
    if ms is None:
        return None
    moment = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _keys_create(args: argparse.Namespace) -> int:
    def create() -> int:
        scopes = sorted(set(args.scope)) if args.scope else sorted(DEFAULT_KEY_SCOPES)
        expires = _expiry_ms(args)
        if args.store == "memory":
            unknown = sorted(set(scopes) - SCOPES)
            if unknown:
                raise _Failed(f"unknown scope {unknown[0]!r}", EXIT_KEYS_REFUSED)
            key = new_api_key()
            print(key)
            workspace = args.workspace or "default"
            print(
                f"(shown once) start the master with --api-key {workspace}:{key} "
                "(a key given by flag has every scope)",
                file=sys.stderr,
            )
            return 0
        if args.store is not None:

            async def make(store: Store) -> tuple[str, Credential]:
                return await Authenticator(store).create_key(
                    args.workspace or "default", scopes, expires_at_ms=expires, name=args.name
                )

            key, record = _with_store(args, make)
        else:
            body: dict[str, Any] = {"scopes": scopes, "name": args.name}
            if args.workspace is not None:
                body["workspace"] = args.workspace
            if expires is not None:
                body["expires_at"] = _time(expires)
            made = _admin_call(args, "POST", "/v1/keys", body)
            key = made["key"]
            record = Credential(
                digest=made["key_id"],
                kind="key",
                workspace=made["workspace"],
                scopes=made["scopes"],
            )
        print(key)
        print(
            f"(shown once) key_id {_cell(record.digest)} · workspace "
            f"{_cell(json.dumps(record.workspace, ensure_ascii=False))} · "
            f"scopes {_cell(','.join(record.scopes or []))}",
            file=sys.stderr,
        )
        return 0

    return _run_keys(args, create)


def _keys_list(args: argparse.Namespace) -> int:
    def listing() -> int:
        if args.store == "memory":
            raise _Failed("an in-memory store keeps no keys: use --http-url", EXIT_KEYS_USAGE)
        if args.store is not None:

            async def read(store: Store) -> list[Credential]:
                return [k for k in await store.list_keys() if not k.revoked]

            keys: list[dict[str, Any]] = [
                {
                    "key_id": k.digest,
                    "workspace": k.workspace,
                    "scopes": sorted(scopes_of(k)),
                    "name": k.name,
                    "created_at": _time(k.created_at_ms or None),
                    "expires_at": _time(k.expires_at_ms),
                    "last_used_at": _time(k.last_used_ms),
                    "given": False,
                    "development": k.development,
                }
                for k in _with_store(args, read)
            ]
        else:
            keys = _admin_call(args, "GET", "/v1/keys")["keys"]
        if args.json:
            print(json.dumps({"keys": keys}, indent=2))
            return 0
        head = ("KEY_ID", "WORKSPACE", "SCOPES", "EXPIRES", "LAST USED")
        print(f"{head[0]:<16} {head[1]:<12} {head[2]:<30} {head[3]:<20} {head[4]:<20} NAME")
        for k in keys:
            # Names and workspaces are whatever a key's creator chose: every cell goes through
            # the shared terminal escaping (no ESC sequence, no CR forging a row); --json is
            # the exact value.
            name = _cell(k["name"]) + (" (--api-key)" if k.get("given") else "")
            print(
                f"{_cell(k['key_id'])[:16]:<16} {_cell(k['workspace'])[:12]:<12} "
                f"{_cell(','.join(k['scopes'])):<30} {_cell(k['expires_at'] or 'never'):<20} "
                f"{_cell(k['last_used_at'] or '-'):<20} {name}"
            )
        return 0

    return _run_keys(args, listing)


def _keys_revoke(args: argparse.Namespace) -> int:
    key_id = args.key if len(args.key) == 64 and not args.key.startswith("rk_") else None
    key_id = key_id or digest(args.key)

    def revoke() -> int:
        if args.store == "memory":
            raise _Failed(
                "an in-memory store keeps no keys: restart the master without that --api-key",
                EXIT_KEYS_USAGE,
            )
        if args.store is not None:

            async def drop(store: Store) -> str | None:
                try:
                    await Authenticator(store).revoke_key(key_id)
                except KeyRefused as exc:
                    return exc.message
                return None

            refused = _with_store(args, drop)
            if refused is not None:
                raise _Failed(refused, EXIT_KEYS_REFUSED)
        else:
            _admin_call(args, "DELETE", f"/v1/keys/{key_id}")
        print(f"revoked API key {key_id}", file=sys.stderr)
        return 0

    return _run_keys(args, revoke)


def _request(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    where = connection(args)
    key, url = where.token, where.http_url
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url.rstrip("/") + path,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("detail", exc.reason)
        except (ValueError, AttributeError):
            detail = exc.reason
        raise SystemExit(f"{method} {_cell(path)}: {exc.code} {_cell(detail)}") from None
    except urllib.error.URLError as exc:
        raise SystemExit(f"cannot reach {url}: {exc.reason}") from None


def _tokens_create(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"grants": sorted(set(args.grant))}
    if args.ttl is not None:
        body["ttl_s"] = args.ttl
    path = f"/v1/sessions/{names.path_segment(args.session_id)}/tokens"
    token = _request(args, "POST", path, body)
    print(token["token"])
    print(
        f"(shown once) token_id {_cell(token['token_id'])} · session "
        f"{_cell(token['session_id'])} · grants {_cell(token['grants'] or 'none')} · "
        f"expires {_cell(token['expires_at'])}",
        file=sys.stderr,
    )
    return 0


def _tokens_revoke(args: argparse.Namespace) -> int:
    _request(args, "DELETE", f"/v1/tokens/{args.token_id}")
    print(f"revoked {args.token_id}", file=sys.stderr)
    return 0
