"""API keys over HTTP (notes §17.6, §17.12): create, list, revoke — ``admin`` keys only.

* ``POST /v1/keys`` ``{"scopes": [...], "expires_at"?, "name"?}`` — 201 with the key; its
  secret (``key``) is in this answer only, the store keeps its SHA-256. An unknown scope is
  400 ``unknown_scope`` naming it, an expiry in the past 400 ``invalid_expiry``, another
  workspace than the admin key's 403.
* ``GET /v1/keys`` — the workspace's live keys (given by flag, stored, the development key
  while it is valid): id, scopes, name, created, expires, last used; never a secret.
* ``DELETE /v1/keys/{key_id}`` — revoke: refused from the next request on, and this node's
  WebSockets (4401) and SSE streams that use it end now (other nodes' within a watch
  round). No key revokes itself (409 ``own_key``), the last admin key stays (409
  ``last_admin_key``), a key given by ``--api-key`` is removed from the flags (409
  ``given_key``). Revoking twice answers 200 again.

Every route asks the act table (``manage_keys``): a key without ``admin`` gets 403, a
session token too.
"""

from __future__ import annotations

from aiohttp import web

from ..auth import Authenticator, KeyRefused, scopes_of
from ..store.base import Credential
from .access import hub_of, principal_of, require_act
from .middleware import ApiError
from .models import KeyBody, KeyOut, decode_body, json_response, ms_to_time
from .revoking import end_connections_of

__all__ = ["add_key_routes", "create_key", "list_keys", "revoke_key"]


def add_key_routes(app: web.Application) -> None:
    """Register ``/v1/keys``."""
    app.router.add_post("/v1/keys", create_key)
    app.router.add_get("/v1/keys", list_keys)
    app.router.add_delete("/v1/keys/{key_id}", revoke_key)


def key_out(auth: Authenticator, record: Credential, secret: str | None = None) -> KeyOut:
    """The API's view of a key (its secret only when just made)."""
    return KeyOut(
        key_id=record.digest,
        workspace=record.workspace,
        scopes=sorted(scopes_of(record)),
        name=record.name,
        created_at=ms_to_time(record.created_at_ms or None),
        expires_at=ms_to_time(record.expires_at_ms),
        last_used_at=ms_to_time(record.last_used_ms),
        given=auth.is_given(record.digest),
        development=record.development,
        key=secret,
    )


async def create_key(request: web.Request) -> web.Response:
    """``POST /v1/keys``."""
    principal = await principal_of(request)
    require_act(principal, "manage_keys")
    body = await decode_body(request, KeyBody)
    if body.workspace is not None and body.workspace != principal.workspace:
        raise ApiError(
            403, "an admin key makes keys for its own workspace only", code="not_allowed"
        )
    auth = hub_of(request).auth
    expires = None if body.expires_at is None else int(body.expires_at.timestamp() * 1000)
    try:
        secret, record = await auth.create_key(
            principal.workspace, body.scopes, expires_at_ms=expires, name=body.name
        )
    except KeyRefused as exc:
        raise ApiError(exc.status, exc.message, code=exc.code) from None
    return json_response(
        key_out(auth, record, secret),
        status=201,
        headers={"Cache-Control": "no-store"},
    )


async def list_keys(request: web.Request) -> web.Response:
    """``GET /v1/keys``."""
    principal = await principal_of(request)
    require_act(principal, "manage_keys")
    auth = hub_of(request).auth
    keys = sorted(
        await auth.list_keys(principal.workspace), key=lambda k: (k.created_at_ms, k.digest)
    )
    return json_response({"keys": [key_out(auth, k) for k in keys]})


async def revoke_key(request: web.Request) -> web.Response:
    """``DELETE /v1/keys/{key_id}``."""
    principal = await principal_of(request)
    require_act(principal, "manage_keys")
    key_id = request.match_info["key_id"]
    hub = hub_of(request)
    try:
        await hub.auth.revoke_key(key_id, by=principal)
    except KeyRefused as exc:
        raise ApiError(exc.status, exc.message, code=exc.code) from None
    end_connections_of(request.app, key_id)
    return json_response({"key_id": key_id, "revoked": True})
