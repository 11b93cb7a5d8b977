"""API keys and session tokens (notes §11, seed 002).

* An **API key** belongs to one workspace and may do anything there.
* A **session token** belongs to one session: attach as edge, read the session, append
  user input, register — plus the grants it was issued with (``client``: attach as the
  session's client; ``delete``: delete the session). Tokens expire and can be revoked.

Only the SHA-256 of a secret is stored; secrets are shown once and never logged. The digest
doubles as the credential's public id (``token_id``): it names a credential (to revoke it)
without revealing it. Every HTTP route and the WebSocket attach ask :class:`Principal`
what the credential may do (``may_*`` / ``require_*``), so the scope rules live here only.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Final, Literal

from protocol import acts, codec
from protocol.errors import BadCredential, Forbidden

from .store.base import Credential, SessionHeader, Store

__all__ = [
    "DEFAULT_TOKEN_TTL_S",
    "GRANTS",
    "MAX_TOKEN_TTL_S",
    "Authenticator",
    "HeldCredentials",
    "Principal",
    "digest",
    "new_api_key",
    "new_session_token",
]

GRANTS: Final = frozenset({"client", "delete"})
"""What a session token may be granted beyond edge, read, append and register."""
DEFAULT_TOKEN_TTL_S: Final = 24 * 3600.0
MAX_TOKEN_TTL_S: Final = 30 * 24 * 3600.0
_KEY_PREFIX: Final = "rk_"
_TOKEN_PREFIX: Final = "st_"
_SKEW_MS: Final = 1000  # clocks of master nodes may differ this much


def digest(secret: str) -> str:
    """The stored form of a secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


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
        """May this principal attach to its session in ``role``?"""
        return self.kind == "key" or role == "edge" or "client" in self.grants

    def may_delete(self) -> bool:
        """May this principal delete sessions it can see? (The act table's cell, §16.6.)"""
        return acts.allowed("request_deletion", "edge", self)

    def may_create(self) -> bool:
        """May this principal create sessions?"""
        return self.kind == "key"

    def may_list(self) -> bool:
        """May this principal list its workspace's sessions? (API keys only.)"""
        return self.kind == "key"

    def may_issue_tokens(self) -> bool:
        """May this principal issue session tokens? (API keys only: the act table's cell.)"""
        return acts.allowed("issue_tokens", "edge", self)

    def may_revoke(self, record: Credential) -> bool:
        """A key revokes any token of its workspace; a token revokes itself (sign out)."""
        if record.kind != "token" or record.workspace != self.workspace:
            return False
        return self.kind == "key" or record.digest == self.credential_id

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
    """Issues and checks credentials kept in the store."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def register_key(self, key: str, workspace: str) -> None:
        """Accept ``key`` for ``workspace`` (e.g. from --api-key)."""
        await self._store.put_credential(
            Credential(digest=digest(key), kind="key", workspace=workspace, created_at_ms=_now_ms())
        )

    async def issue_token(
        self,
        workspace: str,
        session_id: str,
        *,
        grants: frozenset[str] = frozenset(),
        ttl_s: float | None = DEFAULT_TOKEN_TTL_S,
    ) -> tuple[str, Credential]:
        """A new session token for ``session_id``; returns (secret, stored record)."""
        unknown = grants - GRANTS
        if unknown:
            raise ValueError(f"unknown grants: {', '.join(sorted(unknown))}")
        token = new_session_token()
        now = _now_ms()
        record = Credential(
            digest=digest(token),
            kind="token",
            workspace=workspace,
            session_id=session_id,
            grants=sorted(grants),
            expires_at_ms=None if ttl_s is None else now + int(ttl_s * 1000),
            created_at_ms=now,
        )
        await self._store.put_credential(record)
        return token, record

    async def lookup(self, credential_id: str) -> Credential | None:
        """The stored record of a credential by its public id (digest), or None."""
        if len(credential_id) != 64 or any(c not in "0123456789abcdef" for c in credential_id):
            return None
        return await self._store.get_credential(credential_id)

    async def revoke(self, secret_digest: str) -> bool:
        """Revoke a credential by digest; False if unknown."""
        record = await self._store.get_credential(secret_digest)
        if record is None:
            return False
        record.revoked = True
        await self._store.put_credential(record)
        return True

    async def authenticate(self, secret: str | None) -> Principal:
        """The principal for ``secret``; raises BadCredential (unknown, expired, revoked)."""
        if not secret:
            raise BadCredential("a credential is required (API key or session token)")
        if not secret.isascii() or not secret.isprintable():
            # Every secret we issue is URL-safe ASCII; anything else (a header that is not
            # UTF-8, a lone surrogate from JSON) is simply unknown, never an error of ours.
            raise BadCredential("unknown credential")
        wanted = digest(secret)
        record = await self._store.get_credential(wanted)
        if record is None or not hmac.compare_digest(record.digest, wanted):
            raise BadCredential("unknown credential")
        if record.revoked:
            raise BadCredential("this credential was revoked")
        if record.expires_at_ms is not None and record.expires_at_ms <= _now_ms():
            raise BadCredential("this credential has expired")
        return Principal(
            kind=record.kind,
            workspace=record.workspace,
            session_id=record.session_id,
            grants=frozenset(record.grants),
            credential_id=record.digest,
            expires_at_ms=record.expires_at_ms,
            issued_at_ms=record.created_at_ms,
        )


def _now_ms() -> int:
    return int(time.time() * 1000)


def _created_ms(header: SessionHeader) -> int:
    return int(codec.parse_time(header.created_at).timestamp() * 1000)
