# ruff: noqa: E501 - the matrix is one line per action, aligned by column
"""THE credential matrix (notes §11, docs/protocol.md §5 and §11, docs/http-api.md).

One table: every credential a caller can present × every way in (WebSocket hello as client,
as edge, creating; every HTTP route). :mod:`tests.reliability.test_credentials` runs every
cell against a real master — with a fresh session ``S`` (workspace ``default``), a second
session ``S2`` in the same workspace, and freshly issued tokens for each cell — and
:func:`test_every_route_is_in_the_matrix` fails when a route is added to the master without
a row here. To grow the table: add a column to :data:`CREDENTIALS` (and to
``_credential`` in the test), or a row to :data:`MATRIX` with its request in :data:`ROUTES`.

Outcomes: ``OK`` = the welcome (WebSocket); an int ≥ 4000 or 1000–1015 is the close code
the master answers the hello with; an int < 600 is the HTTP status. Decisions encoded here:

* a session the credential may not see answers **404**, like one that does not exist
  (relay/http/access.py): another workspace's key and a token for another session learn
  nothing; a WebSocket hello for it is refused **4404**, like an absent id (issue 12; a
  session token sees no session but its own, so any other id is absent for it);
* a hello without a token is a malformed hello (**4400**: ``token`` is required);
  an unknown, expired or revoked credential is **4401** / HTTP **401**;
* a session token may attach as edge, read its session, append user input, rename it
  (an edge may send ``session.renamed`` anyway, §7.6), stream and export it, cancel its
  turn, revoke itself; the ``client`` grant adds attaching as client, ``delete`` adds
  DELETE; listing, creating, forking and issuing tokens need an API key (**403**);
* API keys are managed by keys with ``admin`` (every key given by flag has it) in their own
  workspace: another workspace's key id is absent (**404**), a key's own id **409**, a token
  **403**;
* health, readiness, metrics and the dashboard's static files need no credential.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["CREDENTIALS", "EXEMPT_ROUTES", "MATRIX", "OK", "ROUTES", "Request"]

OK: Final = "ok"

CREDENTIALS: Final = (
    "key",  # API key of S's workspace
    "key_other_ws",  # API key of another workspace
    "token",  # session token of S, no grants
    "token_client",  # session token of S with the client grant
    "token_delete",  # session token of S with the delete grant
    "token_other_session",  # session token of S2 (same workspace)
    "token_expired",  # session token of S, expired
    "token_revoked",  # session token of S, revoked
    "unknown",  # a secret the master never issued
    "none",  # no credential at all
)

# fmt: off
#   action                               key   key_ow tok  tok_cl tok_dl tok_S2 expired revoked unknown none
MATRIX: Final[dict[str, tuple[int | str, ...]]] = {
    "ws hello client":                  (OK,   4404,  4403, OK,   4403,  4404,  4401,   4401,   4401,   4400),
    "ws hello edge":                    (OK,   4404,  OK,   OK,   OK,    4404,  4401,   4401,   4401,   4400),
    "ws hello client create (new id)":  (OK,   OK,    4404, 4404, 4404,  4404,  4401,   4401,   4401,   4400),
    "GET /v1/whoami":                   (200,  200,   200,  200,  200,   200,   401,    401,    401,    401),
    "GET /v1/sessions":                 (200,  200,   403,  403,  403,   403,   401,    401,    401,    401),
    "GET /v1/wakes":                    (200,  200,   403,  403,  403,   403,   401,    401,    401,    401),
    "POST /v1/sessions":                (201,  201,   403,  403,  403,   403,   401,    401,    401,    401),
    "GET /v1/sessions/S":               (200,  404,   200,  200,  200,   404,   401,    401,    401,    401),
    "PATCH /v1/sessions/S":             (200,  404,   200,  200,  200,   404,   401,    401,    401,    401),
    "GET /v1/sessions/S/events":        (200,  404,   200,  200,  200,   404,   401,    401,    401,    401),
    "POST /v1/sessions/S/events":       (201,  404,   201,  201,  201,   404,   401,    401,    401,    401),
    "GET /v1/sessions/S/events/stream": (200,  404,   200,  200,  200,   404,   401,    401,    401,    401),
    "POST /v1/sessions/S/cancel":       (409,  404,   409,  409,  409,   404,   401,    401,    401,    401),
    "POST /v1/sessions/S/tokens":       (201,  404,   403,  403,  403,   404,   401,    401,    401,    401),
    "POST /v1/sessions/S/fork":         (201,  404,   403,  403,  403,   404,   401,    401,    401,    401),
    "POST /v1/sessions/S/continue":     (409,  404,   403,  403,  403,   404,   401,    401,    401,    401),
    "GET /v1/sessions/S/export":        (200,  404,   200,  200,  200,   404,   401,    401,    401,    401),
    "GET /v1/sessions/S/ag-ui":         (200,  404,   200,  200,  200,   404,   401,    401,    401,    401),
    "POST /v1/sessions/S/ag-ui":        (200,  404,   200,  200,  200,   404,   401,    401,    401,    401),
    "DELETE /v1/tokens/(a token of S)": (200,  404,   404,  404,  404,   404,   401,    401,    401,    401),
    "DELETE /v1/tokens/(own id)":       (403,  403,   200,  200,  200,   200,   401,    401,    401,    401),
    "DELETE /v1/session/S":             (200,  404,   403,  403,  200,   404,   401,    401,    401,    401),
    "DELETE /v1/sessions/S":            (200,  404,   403,  403,  200,   404,   401,    401,    401,    401),
    "GET /v1/keys":                     (200,  200,   403,  403,  403,   403,   401,    401,    401,    401),
    "POST /v1/keys":                    (201,  201,   403,  403,  403,   403,   401,    401,    401,    401),
    "DELETE /v1/keys/(a key of S's ws)": (200, 404,   403,  403,  403,   403,   401,    401,    401,    401),
    "DELETE /v1/keys/(own id)":         (409,  409,   403,  403,  403,   403,   401,    401,    401,    401),
    "GET /healthz":                     (200,  200,   200,  200,  200,   200,   200,    200,    200,    200),
    "GET /readyz":                      (200,  200,   200,  200,  200,   200,   200,    200,    200,    200),
    "GET /metrics":                     (200,  200,   200,  200,  200,   200,   200,    200,    200,    200),
    "GET /":                            (200,  200,   200,  200,  200,   200,   200,    200,    200,    200),
    "GET /config.json":                 (200,  200,   200,  200,  200,   200,   200,    200,    200,    200),
    "GET /openapi.json":                (200,  200,   200,  200,  200,   200,   200,    200,    200,    200),
}
# fmt: on


@dataclass(frozen=True)
class Request:
    """How to perform one action. Paths use ``{S}``, ``{S2}``, ``{NEW}``, ``{T}``, ``{OWN}``."""

    kind: str  # "ws" or "http"
    method: str = "GET"  # HTTP method, or the hello's role for "ws"
    path: str = ""
    body: dict[str, Any] | None = None
    create: bool = False  # ws: a client hello with create, for session {NEW}
    stream: bool = False  # http: read only the status (SSE)
    extra: dict[str, Any] = field(default_factory=dict)


ROUTES: Final[dict[str, Request]] = {
    "ws hello client": Request("ws", "client", "{S}"),
    "ws hello edge": Request("ws", "edge", "{S}"),
    "ws hello client create (new id)": Request("ws", "client", "{NEW}", create=True),
    "GET /v1/whoami": Request("http", "GET", "/v1/whoami"),
    "GET /v1/sessions": Request("http", "GET", "/v1/sessions"),
    "GET /v1/wakes": Request("http", "GET", "/v1/wakes"),
    "POST /v1/sessions": Request("http", "POST", "/v1/sessions", body={"name": "matrix"}),
    "GET /v1/sessions/S": Request("http", "GET", "/v1/sessions/{S}"),
    "PATCH /v1/sessions/S": Request("http", "PATCH", "/v1/sessions/{S}", body={"name": "renamed"}),
    "GET /v1/sessions/S/events": Request("http", "GET", "/v1/sessions/{S}/events"),
    "POST /v1/sessions/S/events": Request(
        "http",
        "POST",
        "/v1/sessions/{S}/events",
        body={"type": "user.message", "payload": {"text": "hello"}},
    ),
    "GET /v1/sessions/S/events/stream": Request(
        "http", "GET", "/v1/sessions/{S}/events/stream", stream=True
    ),
    "POST /v1/sessions/S/cancel": Request("http", "POST", "/v1/sessions/{S}/cancel", body={}),
    "POST /v1/sessions/S/tokens": Request("http", "POST", "/v1/sessions/{S}/tokens", body={}),
    "POST /v1/sessions/S/fork": Request("http", "POST", "/v1/sessions/{S}/fork", body={}),
    # S is live: the key's answer is 409 not_ended (continue is for ended sessions)
    "POST /v1/sessions/S/continue": Request("http", "POST", "/v1/sessions/{S}/continue", body={}),
    "GET /v1/sessions/S/export": Request("http", "GET", "/v1/sessions/{S}/export"),
    "GET /v1/sessions/S/ag-ui": Request("http", "GET", "/v1/sessions/{S}/ag-ui", stream=True),
    "POST /v1/sessions/S/ag-ui": Request(
        "http",
        "POST",
        "/v1/sessions/{S}/ag-ui",
        body={
            "threadId": "t",
            "runId": "r",
            "messages": [{"id": "m", "role": "user", "content": "hi"}],
        },
        stream=True,
    ),
    "DELETE /v1/tokens/(a token of S)": Request("http", "DELETE", "/v1/tokens/{T}"),
    "DELETE /v1/tokens/(own id)": Request("http", "DELETE", "/v1/tokens/{OWN}"),
    "DELETE /v1/session/S": Request("http", "DELETE", "/v1/session/{S}"),
    "DELETE /v1/sessions/S": Request("http", "DELETE", "/v1/sessions/{S}"),
    "GET /v1/keys": Request("http", "GET", "/v1/keys"),
    "POST /v1/keys": Request("http", "POST", "/v1/keys", body={"scopes": ["read"]}),
    "DELETE /v1/keys/(a key of S's ws)": Request("http", "DELETE", "/v1/keys/{K}"),
    "DELETE /v1/keys/(own id)": Request("http", "DELETE", "/v1/keys/{OWN}"),
    "GET /healthz": Request("http", "GET", "/healthz"),
    "GET /readyz": Request("http", "GET", "/readyz"),
    "GET /metrics": Request("http", "GET", "/metrics"),
    "GET /": Request("http", "GET", "/"),
    "GET /config.json": Request("http", "GET", "/config.json"),
    "GET /openapi.json": Request("http", "GET", "/openapi.json"),
}

# Routes served by the master that take no credential and hold nothing a credential guards.
EXEMPT_ROUTES: Final = frozenset({("GET", "/static/{name}"), ("HEAD", "/static/{name}")})
