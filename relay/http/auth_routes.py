"""Session tokens over HTTP (notes §11, seed 002): issue, revoke, and "who am I".

* ``POST /v1/sessions/{id}/tokens`` ``{"grants": ["client"|"delete"…], "ttl_s": N}`` —
  API keys only; 201 with the token, its secret shown in this answer only.
* ``DELETE /v1/tokens/{token_id}`` — revoke. An API key revokes any session token of its
  workspace; a session token may revoke itself (sign out). Revocation is immediate: the
  credential is refused from the next request on, and this node closes the WebSocket
  connections (4401) and SSE streams that authenticated with it. Unknown ids, and ids the
  caller may not revoke, answer 404. Revoking twice answers 200 again.
* ``GET /v1/whoami`` — the presented credential's kind, workspace, session, grants, expiry.

``token_id`` is the SHA-256 of the secret: it names the token without revealing it.
"""

from __future__ import annotations

from aiohttp import web

from ..auth import is_credential_id
from .access import hub_of, principal_of, require_act, visible_header
from .middleware import HTTP_METRICS, ApiError
from .models import TokenBody, WhoAmI, decode_body, json_response, ms_to_time
from .revoking import end_connections_of
from .sessions import issue_token

__all__ = ["create_token", "revoke_token", "whoami"]


async def create_token(request: web.Request) -> web.Response:
    """``POST /v1/sessions/{session_id}/tokens``."""
    principal = await principal_of(request)
    header = await visible_header(request, principal)
    require_act(principal, "issue_tokens")
    spec = await decode_body(request, TokenBody, optional=True)
    token = await issue_token(request, principal, header.session_id, spec)
    return json_response(token, status=201)


async def revoke_token(request: web.Request) -> web.Response:
    """``DELETE /v1/tokens/{token_id}``."""
    hub = hub_of(request)
    principal = await principal_of(request)
    token_id = request.match_info["token_id"]
    if not is_credential_id(token_id):  # never echoed, never looked up
        raise ApiError(
            404, "no session token with that id (a token id is 64 hex digits)", code="not_found"
        )
    record = await hub.auth.lookup(token_id)
    if record is not None and record.kind == "key" and record.workspace == principal.workspace:
        raise ApiError(
            403,
            "this is an API key: revoke it with DELETE /v1/keys/{key_id} or `rawp keys revoke`",
            code="not_allowed",
        )
    if record is None or not principal.may_revoke(record):
        raise ApiError(404, f"no session token {token_id}", code="not_found")
    if not record.revoked:
        await hub.auth.revoke(token_id)
        request.app[HTTP_METRICS].tokens_revoked.inc()
    end_connections_of(request.app, token_id)
    return json_response({"token_id": token_id, "revoked": True})


async def whoami(request: web.Request) -> web.Response:
    """``GET /v1/whoami``."""
    principal = await principal_of(request)
    return json_response(
        WhoAmI(
            kind=principal.kind,
            workspace=principal.workspace,
            session_id=principal.session_id,
            grants=sorted(principal.grants),
            expires_at=ms_to_time(principal.expires_at_ms),
            token_id=principal.credential_id,
            scopes=sorted(principal.scopes),
        )
    )
