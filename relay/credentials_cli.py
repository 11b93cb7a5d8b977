"""``rawp keys create|revoke`` and ``rawp tokens create|revoke``: credentials from the shell.

* API keys live in the store: ``rawp keys create --workspace W --store redis://…`` registers
  one there (with the embedded memory store it is printed for ``--api-key``);
  ``rawp keys revoke KEY_OR_ID --store redis://…`` marks one revoked there (with the
  embedded memory store, restart the master without that ``--api-key`` instead).
* Session tokens are issued and revoked by a running master over HTTP (``--http-url`` or
  ``RAWP_HTTP_URL``), with an API key (``--token`` or ``RAWP_API_KEY``; the connection flags
  of every command, :mod:`protocol.cli_flags`): ``rawp tokens create SESSION_ID [--grant
  client] [--grant delete] [--ttl SECONDS]`` prints the token (shown once) on stdout;
  ``rawp tokens revoke TOKEN_ID`` revokes it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from protocol.cli_flags import LOCAL_HTTP_URL, add_connection_flags, connection
from protocol.errors import StoreError

from .auth import (
    DEFAULT_TOKEN_TTL_S,
    GRANTS,
    MAX_TOKEN_TTL_S,
    Authenticator,
    digest,
    new_api_key,
)
from .store.base import Store

T = TypeVar("T")

__all__ = ["add_key_commands", "add_token_commands"]


def add_key_commands(keys_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``rawp keys create|revoke``."""
    create = keys_sub.add_parser("create", help="create an API key for a workspace (shown once)")
    create.add_argument("--workspace", default="default")
    create.add_argument(
        "--store",
        default="memory",
        help="register the key in this store (redis://…); with memory, pass it to --api-key",
    )
    create.add_argument("--redis-cluster", action="store_true")
    create.set_defaults(handler=_keys_create)
    revoke = keys_sub.add_parser("revoke", help="revoke an API key in a shared store")
    revoke.add_argument("key", metavar="KEY_OR_ID", help="the key, or its id (SHA-256 hex)")
    revoke.add_argument("--store", required=True, help="redis://… (the store the master uses)")
    revoke.add_argument("--redis-cluster", action="store_true")
    revoke.set_defaults(handler=_keys_revoke)


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


def _keys_create(args: argparse.Namespace) -> int:
    key = new_api_key()
    if args.store == "memory":
        print(key)
        print(
            f"(shown once) start the master with --api-key {args.workspace}:{key}", file=sys.stderr
        )
        return 0
    _with_store(args, lambda store: Authenticator(store).register_key(key, args.workspace))
    print(key)
    print(f"(registered for workspace {args.workspace!r}; shown once)", file=sys.stderr)
    return 0


def _keys_revoke(args: argparse.Namespace) -> int:
    key_id = args.key if len(args.key) == 64 and not args.key.startswith("rk_") else None
    key_id = key_id or digest(args.key)

    async def revoke(store: Store) -> bool:
        record = await store.get_credential(key_id)
        if record is None or record.kind != "key":
            return False
        return await Authenticator(store).revoke(key_id)

    if not _with_store(args, revoke):
        print(f"no API key {key_id} in {args.store}", file=sys.stderr)
        return 1
    print(f"revoked API key {key_id}", file=sys.stderr)
    return 0


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
        except ValueError:
            detail = exc.reason
        raise SystemExit(f"{method} {path}: {exc.code} {detail}") from None
    except urllib.error.URLError as exc:
        raise SystemExit(f"cannot reach {url}: {exc.reason}") from None


def _tokens_create(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"grants": sorted(set(args.grant))}
    if args.ttl is not None:
        body["ttl_s"] = args.ttl
    token = _request(args, "POST", f"/v1/sessions/{args.session_id}/tokens", body)
    print(token["token"])
    print(
        f"(shown once) token_id {token['token_id']} · session {token['session_id']} · "
        f"grants {token['grants'] or 'none'} · expires {token['expires_at']}",
        file=sys.stderr,
    )
    return 0


def _tokens_revoke(args: argparse.Namespace) -> int:
    _request(args, "DELETE", f"/v1/tokens/{args.token_id}")
    print(f"revoked {args.token_id}", file=sys.stderr)
    return 0
