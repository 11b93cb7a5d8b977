"""API keys and session tokens (notes §11, §17.6, seed 002).

* An **API key** belongs to one workspace and carries scopes (``read``, ``write``,
  ``delete``, ``tokens``, ``admin``) and an optional expiry. Keys given by ``--api-key`` carry
  every scope and are never stored: they live while they are given. When none is given, the
  store's **development key** (made once, kept with its secret so each start prints it) is
  valid; it is refused while any key is given.
* A **session token** belongs to one session: attach as edge, read the session, append
  user input, register — plus the grants it was issued with (``client``: attach as the
  session's client; ``delete``: delete the session). It carries its key's scopes (within
  ``read``, ``write``, ``delete``) and is valid only while that key is. Tokens expire and can
  be revoked.

Only the SHA-256 of a secret is stored; secrets are shown once and never logged. The digest
doubles as the credential's public id (``token_id``): it names a credential (to revoke it)
without revealing it. Every HTTP route and the WebSocket attach ask :class:`Principal`
what the credential may do (``may_*`` / ``require_*``), so the scope rules live here only.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from protocol import acts, codec
from protocol.errors import BadCredential, Forbidden, StoreError

from .store.base import Credential, SessionHeader, Store

__all__ = [
    "DEFAULT_KEY_SCOPES",
    "DEFAULT_TOKEN_TTL_S",
    "GRANTS",
    "MAX_TOKEN_TTL_S",
    "SCOPES",
    "Authenticator",
    "HeldCredentials",
    "KeyRefused",
    "Principal",
    "digest",
    "is_credential_id",
    "new_api_key",
    "new_session_token",
    "scopes_of",
]

GRANTS: Final = frozenset({"client", "delete"})
"""What a session token may be granted beyond edge, read, append and register."""
DEFAULT_TOKEN_TTL_S: Final = 24 * 3600.0
MAX_TOKEN_TTL_S: Final = 30 * 24 * 3600.0
_KEY_PREFIX: Final = "rk_"
_TOKEN_PREFIX: Final = "st_"
_SKEW_MS: Final = 1000  # clocks of master nodes may differ this much
_TOUCH_EVERY_MS: Final = 60_000  # last use recorded at most this often per credential and node
SCOPES: Final = acts.SCOPES
DEFAULT_KEY_SCOPES: Final = SCOPES - {"admin"}
"""A key made without naming scopes (``rawp keys create``) may do all but manage keys."""
_GRANT_SCOPE: Final = {"client": "write", "delete": "delete"}
"""The scope a key needs to issue a token with each grant (a token never outgrows its key)."""


class KeyRefused(Exception):
    """A key operation refused (unknown scope, past expiry, the last admin key, ...)."""

    def __init__(self, message: str, *, status: int = 400, code: str = "invalid_body") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


def scopes_of(record: Credential) -> frozenset[str]:
    """What a stored credential may do (records from before scopes: what they could then)."""
    if record.scopes is None:
        return acts.SCOPES if record.kind == "key" else acts.TOKEN_SCOPES
    return frozenset(record.scopes) & (acts.SCOPES if record.kind == "key" else acts.TOKEN_SCOPES)


def digest(secret: str) -> str:
    """The stored form of a secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


def is_credential_id(text: str) -> bool:
    """Is ``text`` the form of a credential's id (a :func:`digest`: 64 lowercase hex digits)?
    Anything else names no credential and is never echoed or looked up."""
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def new_api_key() -> str:
    """A fresh API key (shown once)."""
    return _KEY_PREFIX + secrets.token_urlsafe(32)


def new_session_token() -> str:
    """A fresh session token (shown once)."""
    return _TOKEN_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Principal:
    """Who a request or connection acts as."""

    kind: Literal["key", "token"]
    workspace: str
    session_id: str | None = None
    grants: frozenset[str] = frozenset()
    credential_id: str = ""
    """The credential's public id (the digest of its secret); "" for principals built in code."""
    expires_at_ms: int | None = None
    issued_at_ms: int = 0
    scopes: frozenset[str] = acts.SCOPES
    """What it may do (the act table's scope column); every scope for principals built in code."""
    issued_by: str | None = None
    """A token's issuing key (digest): the token is valid while that key is."""

    @property
    def expired(self) -> bool:
        """True once the credential's expiry has passed (checked again on long streams)."""
        return self.expires_at_ms is not None and self.expires_at_ms <= _now_ms()

    def can_see(self, header: SessionHeader) -> bool:
        """May this principal read the session?

        A token issued before its session was created belongs to an earlier session of the
        same id (deleted, then created again): it does not see the new one.
        """
        if header.workspace != self.workspace:
            return False
        if self.kind == "key":
            return True
        if header.session_id != self.session_id:
            return False
        return not self.issued_at_ms or _created_ms(header) <= self.issued_at_ms + _SKEW_MS

    def require_session(self, header: SessionHeader) -> None:
        """Raise Forbidden unless the principal may read the session."""
        if not self.can_see(header):
            raise Forbidden("this credential is not valid for that session")

    def require_key(self, what: str) -> None:
        """Raise Forbidden unless this is an API key."""
        if self.kind != "key":
            raise Forbidden(f"{what} needs an API key; a session token cannot do it")

    def may_attach(self, role: Literal["client", "edge"]) -> bool:
        """May this principal attach to its session in ``role``? (The act table's cell.)"""
        return acts.allowed("attach", role, self)

    def may_delete(self) -> bool:
        """May this principal delete sessions it can see? (The act table's cell, §16.6.)"""
        return acts.allowed("request_deletion", "edge", self)

    def may_create(self, role: Literal["client", "edge"] = "edge") -> bool:
        """May this principal create sessions? (An API key with ``write``.)"""
        return acts.allowed("create_session", role, self)

    def may_list(self) -> bool:
        """May this principal list its workspace's sessions? (An API key with ``read``.)"""
        return acts.allowed("list_sessions", "edge", self)

    def may_issue_tokens(self) -> bool:
        """May this principal issue session tokens? (API keys only: the act table's cell.)"""
        return acts.allowed("issue_tokens", "edge", self)

    def may_grant(self, grant: str) -> bool:
        """May this principal issue a token with ``grant``? (Its key covers the grant.)"""
        scope = _GRANT_SCOPE.get(grant)
        return scope is not None and scope in self.scopes

    def grant_refusal(self, grant: str) -> str:
        """Why :meth:`may_grant` said no."""
        return (
            f"a token with the {grant} grant needs a key with the {_GRANT_SCOPE.get(grant)} "
            "scope: a token is never wider than its key"
        )

    def may_revoke(self, record: Credential) -> bool:
        """A key with ``tokens`` revokes any token of its workspace; a token revokes itself
        (sign out)."""
        if record.kind != "token" or record.workspace != self.workspace:
            return False
        if record.digest == self.credential_id:
            return True
        return self.kind == "key" and "tokens" in self.scopes

    def require_delete(self) -> None:
        """Raise Forbidden unless the principal may delete (API key, or the ``delete`` grant)."""
        if not self.may_delete():
            raise Forbidden("this session token was not granted delete")


class HeldCredentials:
    """The distinct credentials this node's attached connections hold, with how many hold each.

    What the credential watch reads every round (notes §16.9): one entry per credential, not
    per connection, so a round costs the credentials in use, not the audience (walking every
    participant twice a second was ~4 % of an attach's CPU with 2,000 connections, and grows
    with them: ``make bench ARGS=storm``). A connection holds from its attach to its detach.
    """

    def __init__(self) -> None:
        self._held: dict[str, tuple[Principal, int]] = {}

    def hold(self, principal: Principal) -> None:
        """One more connection attached with ``principal``'s credential."""
        credential_id = principal.credential_id
        if not credential_id:
            return  # built in code (tests): nothing to check
        held = self._held.get(credential_id)
        self._held[credential_id] = (principal, 1) if held is None else (held[0], held[1] + 1)

    def release(self, principal: Principal) -> None:
        """One connection that held ``principal``'s credential has detached."""
        held = self._held.get(principal.credential_id)
        if held is None:
            return
        if held[1] <= 1:
            del self._held[principal.credential_id]
        else:
            self._held[principal.credential_id] = (held[0], held[1] - 1)

    def principals(self) -> dict[str, Principal]:
        """One principal per credential held (a copy: the caller may await while reading it)."""
        return {credential_id: held[0] for credential_id, held in self._held.items()}

    def count(self, credential_id: str) -> int:
        """How many connections hold the credential."""
        held = self._held.get(credential_id)
        return 0 if held is None else held[1]


class Authenticator:
    """Issues and checks credentials: the keys given to this node, and the store's."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._given: dict[str, Credential] = {}
        self._touched: dict[str, int] = {}  # each key's last use on this node
        self._written: dict[str, int] = {}  # when this node last stored it
        self._touches: set[asyncio.Task[None]] = set()

    def give_keys(self, keys: Iterable[tuple[str, str]]) -> None:
        """Accept these ``(workspace, secret)`` keys, with every scope, while this node runs.

        They are never stored, so a key dropped from the flags is refused after a restart;
        while any is given, the store's development key is refused. One secret given for two
        workspaces is refused (KeyRefused): which one it belongs to would be a guess.
        """
        given: dict[str, Credential] = {}
        now = _now_ms()
        for workspace, secret in keys:
            record = Credential(
                digest=digest(secret),
                kind="key",
                workspace=workspace,
                created_at_ms=now,
                scopes=sorted(acts.SCOPES),
                name="--api-key",
            )
            earlier = given.get(record.digest)
            if earlier is not None and earlier.workspace != workspace:
                raise KeyRefused(
                    f"one API key is given for two workspaces ({earlier.workspace!r} and "
                    f"{workspace!r}): give each workspace its own key"
                )
            given[record.digest] = record
        self._given = given

    @property
    def keys_given(self) -> bool:
        """True when keys were given to this node (the development key is then refused)."""
        return bool(self._given)

    def is_given(self, credential_id: str) -> bool:
        """Is this key one given to this node (not stored, not revocable over the API)?"""
        return credential_id in self._given

    async def development_key(self, workspace: str = "default") -> str:
        """The store's development key, made on the first start and reused by later ones."""
        for record in await self._store.list_keys():
            usable = record.development and not record.revoked and record.secret
            if usable and record.secret and not _expired(record.expires_at_ms):
                return record.secret
        secret = new_api_key()
        await self._store.put_credential(
            Credential(
                digest=digest(secret),
                kind="key",
                workspace=workspace,
                created_at_ms=_now_ms(),
                scopes=sorted(acts.SCOPES),
                name="development key",
                development=True,
                secret=secret,
            )
        )
        return secret

    async def create_key(
        self,
        workspace: str,
        scopes: Iterable[str],
        *,
        expires_at_ms: int | None = None,
        name: str = "",
    ) -> tuple[str, Credential]:
        """A new stored API key; returns (secret, record). Raises KeyRefused on bad input."""
        wanted = list(scopes)
        unknown = sorted(set(wanted) - acts.SCOPES)
        if unknown:
            raise KeyRefused(
                f"unknown scope {unknown[0]!r}; a key may carry {', '.join(sorted(acts.SCOPES))}",
                code="unknown_scope",
            )
        if not wanted:
            raise KeyRefused("a key needs at least one scope", code="invalid_body")
        now = _now_ms()
        if expires_at_ms is not None and expires_at_ms <= now:
            raise KeyRefused("expires_at is in the past", code="invalid_expiry")
        secret = new_api_key()
        record = Credential(
            digest=digest(secret),
            kind="key",
            workspace=workspace,
            created_at_ms=now,
            scopes=sorted(set(wanted)),
            expires_at_ms=expires_at_ms,
            name=name,
        )
        await self._store.put_credential(record)
        return secret, record

    async def list_keys(self, workspace: str | None = None) -> list[Credential]:
        """The live keys (given and stored, not revoked), of one workspace or all."""
        stored = [k for k in await self._store.list_keys() if not k.revoked]
        if self._given:
            stored = [k for k in stored if not k.development]
        keys = [*self._given.values(), *stored]
        for key in keys:
            used = self._touched.get(key.digest)
            if used is not None and (key.last_used_ms or 0) < used:
                key.last_used_ms = used
        return [k for k in keys if workspace is None or k.workspace == workspace]

    async def revoke_key(self, key_id: str, *, by: Principal | None = None) -> Credential:
        """Revoke a stored key by its id (digest); raises KeyRefused.

        ``by``: the key asking over the API. No key revokes itself, and the workspace's last
        live ``admin`` key stays (the API could no longer manage keys); without ``by`` (the
        store itself, ``rawp keys revoke --store``) both are allowed. Keys given by flag are
        removed from the flags instead.
        """
        if not is_credential_id(key_id):
            raise KeyRefused(
                "no API key with that id (a key id is 64 hex digits)", status=404, code="not_found"
            )
        record = await self.lookup(key_id)
        if record is None or record.kind != "key":
            raise KeyRefused(f"no API key {key_id}", status=404, code="not_found")
        if by is not None and record.workspace != by.workspace:
            raise KeyRefused(f"no API key {key_id}", status=404, code="not_found")
        if by is not None and by.credential_id == key_id:
            raise KeyRefused("a key cannot revoke itself", status=409, code="own_key")
        if key_id in self._given:
            raise KeyRefused(
                "this key is given by --api-key: restart the master without it",
                status=409,
                code="given_key",
            )
        if record.revoked:
            return record
        if by is not None and "admin" in scopes_of(record):
            # Over the API only: whoever holds the store can always make another.
            admins = [
                k
                for k in await self.list_keys(record.workspace)
                if "admin" in scopes_of(k) and not _expired(k.expires_at_ms)
            ]
            if len(admins) <= 1:
                raise KeyRefused(
                    "this is the workspace's last admin key: create another first",
                    status=409,
                    code="last_admin_key",
                )
        await self.revoke(key_id)
        record.revoked = True
        return record

    async def issue_token(
        self,
        workspace: str,
        session_id: str,
        *,
        grants: frozenset[str] = frozenset(),
        ttl_s: float | None = DEFAULT_TOKEN_TTL_S,
        issuer: Principal | None = None,
    ) -> tuple[str, Credential]:
        """A new session token for ``session_id``; returns (secret, stored record).

        With ``issuer`` (the key asking) the token carries that key's scopes, ends no later
        than it, and is valid only while it is; a grant the key's scopes do not cover raises
        KeyRefused (403).
        """
        unknown = grants - GRANTS
        if unknown:
            raise ValueError(f"unknown grants: {', '.join(sorted(unknown))}")
        token = new_session_token()
        now = _now_ms()
        expires = None if ttl_s is None else now + int(ttl_s * 1000)
        scopes = acts.TOKEN_SCOPES
        issued_by = None
        if issuer is not None:
            for grant in sorted(grants):
                if not issuer.may_grant(grant):
                    raise KeyRefused(issuer.grant_refusal(grant), status=403, code="not_allowed")
            scopes = issuer.scopes & acts.TOKEN_SCOPES
            if issuer.expires_at_ms is not None:
                expires = (
                    issuer.expires_at_ms if expires is None else min(expires, issuer.expires_at_ms)
                )
            issued_by = issuer.credential_id or None
        record = Credential(
            digest=digest(token),
            kind="token",
            workspace=workspace,
            session_id=session_id,
            grants=sorted(grants),
            expires_at_ms=expires,
            created_at_ms=now,
            scopes=sorted(scopes),
            issued_by=issued_by,
        )
        await self._store.put_credential(record)
        return token, record

    async def lookup(self, credential_id: str) -> Credential | None:
        """The record of a credential by its public id (digest), or None."""
        if len(credential_id) != 64 or any(c not in "0123456789abcdef" for c in credential_id):
            return None
        given = self._given.get(credential_id)
        if given is not None:
            return given
        return await self._store.get_credential(credential_id)

    async def revoke(self, secret_digest: str) -> bool:
        """Revoke a stored credential by digest; False if unknown."""
        record = await self._store.get_credential(secret_digest)
        if record is None:
            return False
        record.revoked = True
        await self._store.put_credential(record)
        return True

    async def still_valid(self, principal: Principal) -> bool:
        """Is the credential behind ``principal`` still valid (not revoked, expired, removed,
        nor its issuing key)? Store failures raise (the caller decides)."""
        if principal.expired:
            return False
        record = await self._valid_record(principal.credential_id)
        if record is None:
            return False
        return (
            principal.issued_by is None or await self._valid_record(principal.issued_by) is not None
        )

    async def _valid_record(self, credential_id: str) -> Credential | None:
        given = self._given.get(credential_id)
        if given is not None:
            return given
        record = await self._store.get_credential(credential_id)
        if record is None or record.revoked or _expired(record.expires_at_ms):
            return None
        if record.development and self._given:
            return None
        return record

    async def authenticate(self, secret: str | None) -> Principal:
        """The principal for ``secret``; raises BadCredential (unknown, expired, revoked)."""
        if not secret:
            raise BadCredential("a credential is required (API key or session token)")
        if not secret.isascii() or not secret.isprintable():
            # Every secret we issue is URL-safe ASCII; anything else (a header that is not
            # UTF-8, a lone surrogate from JSON) is simply unknown, never an error of ours.
            raise BadCredential("unknown credential")
        wanted = digest(secret)
        record = self._given.get(wanted)
        if record is None:
            record = await self._store.get_credential(wanted)
        # The record is found by the digest; comparing digests in constant time means no
        # early exit tells a prober how much of a secret it guessed.
        if record is None or not hmac.compare_digest(record.digest, wanted):
            raise BadCredential("unknown credential")
        if record.development and self._given:
            raise BadCredential("the development key is not valid while --api-key keys are given")
        if record.revoked:
            raise BadCredential("this credential was revoked")
        if _expired(record.expires_at_ms):
            raise BadCredential("this credential has expired")
        if record.issued_by is not None and await self._valid_record(record.issued_by) is None:
            raise BadCredential("the key that issued this token is no longer valid")
        self._touch(record)
        return Principal(
            kind=record.kind,
            workspace=record.workspace,
            session_id=record.session_id,
            grants=frozenset(record.grants),
            credential_id=record.digest,
            expires_at_ms=record.expires_at_ms,
            issued_at_ms=record.created_at_ms,
            scopes=scopes_of(record),
            issued_by=record.issued_by,
        )

    def _touch(self, record: Credential) -> None:
        """Record the use of a key (at most once a minute per key on this node)."""
        if record.kind != "key":
            return
        now = _now_ms()
        self._touched[record.digest] = now
        last = self._written.get(record.digest)
        if record.digest in self._given or (last is not None and now - last < _TOUCH_EVERY_MS):
            return
        self._written[record.digest] = now
        task = asyncio.get_running_loop().create_task(self._store_touch(record.digest, now))
        self._touches.add(task)
        task.add_done_callback(self._touches.discard)

    async def _store_touch(self, credential_id: str, at_ms: int) -> None:
        with contextlib.suppress(StoreError, OSError):  # a use not recorded is no failure
            await self._store.touch_credential(credential_id, at_ms)


def _expired(expires_at_ms: int | None) -> bool:
    return expires_at_ms is not None and expires_at_ms <= _now_ms()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _created_ms(header: SessionHeader) -> int:
    return int(codec.parse_time(header.created_at).timestamp() * 1000)
