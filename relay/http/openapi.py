"""``GET /openapi.json``: the HTTP API as an OpenAPI 3.1 document, generated (issue 15).

Nothing here is a hand-written schema: the operations are read from the application's own
route table (``app.router``), and every body is a msgspec Struct — the request models of
:mod:`relay.http.models`, and the answer shapes declared below as Structs — whose JSON Schema
msgspec writes. :data:`OPERATIONS` only says, per route, which Struct goes where, which query
parameters the handler reads and which statuses it answers; ``describe`` refuses a route that
:data:`OPERATIONS` does not cover (and the tests check both ways), so the document cannot lose a
route. Schemathesis fuzzes a live master from this document (``tests/relay/http``,
``make bench ARGS=schemathesis``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import msgspec
from aiohttp import web

from protocol.frames import PROTOCOL_VERSION

from .models import (
    AppendBody,
    CancelBody,
    ContinueBody,
    CreateBody,
    ForkBody,
    KeyBody,
    KeyOut,
    RenameBody,
    SessionOut,
    StreamGap,
    StreamReset,
    TokenBody,
    TokenOut,
    WhoAmI,
    json_response,
)
from .wakes import WakePage

__all__ = [
    "OPENAPI_DOCUMENT",
    "OPERATIONS",
    "Operation",
    "Param",
    "SseEvent",
    "add_openapi_route",
    "describe",
    "openapi_document",
]

# --- answer shapes (what the handlers encode), as Structs ----------------------------------


class Problem(msgspec.Struct, kw_only=True):
    """RFC 9457 problem details: every error answer (``code`` is machine-readable)."""

    type: str
    title: str
    status: int
    detail: str
    code: str | None = None


class SenderOut(msgspec.Struct, kw_only=True):
    """Who sent a logged frame (stamped by the master)."""

    role: Literal["client", "edge", "master"]
    participant_id: str


class StampedEvent(msgspec.Struct, kw_only=True):
    """A logged frame as delivered: the sender's envelope plus ``seq`` and ``sender``
    (unknown keys are kept; docs/protocol.md §4 lists each type's payload)."""

    type: str
    message_id: str
    session_id: str
    timestamp: str
    payload: dict[str, Any]
    seq: int
    sender: SenderOut
    metadata: dict[str, Any] | None = None


class CreateAnswer(msgspec.Struct, kw_only=True):
    """A create or fork: the session, its one token (first time only), and whether it is new."""

    session: SessionOut
    token: TokenOut | None
    created: bool


class SessionPage(msgspec.Struct, kw_only=True):
    """One page of the workspace's sessions; ``next_after`` is the next page's ``after``."""

    sessions: list[SessionOut]
    next_after: str | None


class PageCursor(msgspec.Struct, kw_only=True):
    """Where the next page starts: ``before_seq`` (order desc) or ``after_seq`` (asc)."""

    before_seq: int | None = None
    after_seq: int | None = None


class EventPage(msgspec.Struct, kw_only=True):
    """One page of a session's log."""

    session_id: str
    order: Literal["asc", "desc"]
    head_seq: int
    next: PageCursor | None
    events: list[StampedEvent]


class AppendAnswer(msgspec.Struct, kw_only=True):
    """An appended frame: its seq, and whether it was a retry of one already logged."""

    seq: int
    message_id: str
    duplicate: bool
    event: StampedEvent | None


class ExportAnswer(msgspec.Struct, kw_only=True):
    """``format=json``: the session and every logged frame."""

    session: SessionOut
    exported_at: str
    events: list[StampedEvent]


class DeleteAnswer(msgspec.Struct, kw_only=True):
    """A deletion (``deleted`` false: nothing to delete, with ``if_absent=ok``)."""

    session_id: str
    deleted: bool


class RevokeAnswer(msgspec.Struct, kw_only=True):
    """A revoked session token."""

    token_id: str
    revoked: bool


class KeyList(msgspec.Struct, kw_only=True):
    """The workspace's live API keys (never their secrets)."""

    keys: list[KeyOut]


class KeyRevoked(msgspec.Struct, kw_only=True):
    """A revoked API key."""

    key_id: str
    revoked: bool


class Health(msgspec.Struct, kw_only=True):
    """``/healthz`` and ``/readyz``."""

    status: Literal["ok", "ready"]
    store: str | None = None
    version: str | None = None  # /healthz: this build (rawp --version)


class DashboardConfig(msgspec.Struct, kw_only=True):
    """Where the dashboard's WebSocket connects."""

    ws_url: str | None
    protocol_version: str
    subprotocol: str


# --- the operations ------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """A query parameter (or header) a handler reads."""

    name: str
    schema: dict[str, Any]
    description: str
    where: Literal["query", "header"] = "query"


# (Struct or None, media type(s), description); a Struct describes the first media type only
Answer = tuple[type[Any] | None, str | tuple[str, ...], str]
_JSON: Final = "application/json"


def _run_agent_input_schema(ref_template: str) -> dict[str, Any]:
    """AG-UI's ``RunAgentInput`` as its package writes it (camelCase, as on the wire)."""
    from ag_ui.core import RunAgentInput

    schema: dict[str, Any] = RunAgentInput.model_json_schema(
        by_alias=True, ref_template=ref_template
    )
    return schema


@dataclass(frozen=True)
class Operation:
    """What the route table does not say about one route."""

    summary: str
    answers: dict[str, Answer]
    auth: Literal["credential", "none"] = "credential"
    body: type[Any] | None = None
    body_required: bool = False
    foreign_body: Callable[[str], dict[str, Any]] | None = None
    """A body defined by another package's model (AG-UI's ``RunAgentInput``): its own JSON
    Schema, given the ``$ref`` template to place its definitions under ``components``."""
    params: tuple[Param, ...] = ()
    tags: tuple[str, ...] = ("sessions",)
    problems: tuple[str, ...] = field(default=("400", "401", "403", "404", "409", "422", "503"))
    events: tuple[SseEvent, ...] = ()
    """A stream's SSE event names and the model of each one's ``data`` (``x-sse-events`` on
    its 200 answer, and named in the answer's description)."""


@dataclass(frozen=True)
class SseEvent:
    """One ``event:`` name of a Server-Sent Events stream."""

    name: str
    data: type[Any]
    description: str


_MAX_SEQ: Final = 2**63 - 1  # access.MAX_QUERY_INT: larger answers 400 invalid_query


def _int(minimum: int | None = None, maximum: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


_SESSION: Final[Answer] = (SessionOut, _JSON, "the session")
_CREATED: Final[Answer] = (CreateAnswer, _JSON, "created (its token's secret is shown once)")
_EXISTING: Final[Answer] = (CreateAnswer, _JSON, "it existed already: unchanged, no token")
_APPENDED: Final[Answer] = (AppendAnswer, _JSON, "logged and relayed")
_AGAIN: Final[Answer] = (AppendAnswer, _JSON, "a retry: already logged with this seq")
_DELETE: Final = Operation(
    "delete the session (§9 termination: reason master_request)",
    {"200": (DeleteAnswer, _JSON, "deleted, or nothing to delete with if_absent=ok")},
    params=(
        Param("if_absent", {"type": "string", "enum": ["ok"]}, "200 instead of 404 if absent"),
        Param("if_idle", {"type": "string", "enum": ["true"]}, "409 while anyone is attached"),
    ),
)

OPERATIONS: Final[dict[tuple[str, str], Operation]] = {
    ("POST", "/v1/sessions"): Operation(
        "create a session (idempotent on session_id; API keys only)",
        {"201": _CREATED, "200": _EXISTING},
        body=CreateBody,
    ),
    ("GET", "/v1/sessions"): Operation(
        "the workspace's sessions by id, paged (API keys only)",
        {"200": (SessionPage, _JSON, "one page")},
        params=(
            Param("limit", _int(1, 200), "page size (default 50)"),
            Param("after", {"type": "string"}, "the previous page's next_after"),
        ),
    ),
    ("GET", "/v1/wakes"): Operation(
        "the workspace's wakes, paged: due=true those a scheduler should start an agent for "
        "(API keys only)",
        {"200": (WakePage, _JSON, "one page")},
        params=(
            Param(
                "due",
                {"type": "string", "enum": ["true", "false"]},
                "true: only wakes that came due while the client was away and it has not "
                "attached since; else pending ones too",
            ),
            Param("limit", _int(1, 500), "page size (default 100)"),
            Param("cursor", {"type": "string"}, "the previous page's next_cursor"),
        ),
        tags=("wakes",),
        problems=("400", "401", "403", "503"),
    ),
    ("GET", "/v1/sessions/{session_id}"): Operation(
        "header, status, participants with presence, usage totals", {"200": _SESSION}
    ),
    ("PATCH", "/v1/sessions/{session_id}"): Operation(
        "rename (§7.6 session.renamed, renamed_by master)",
        {"200": _SESSION},
        body=RenameBody,
        body_required=True,
    ),
    ("DELETE", "/v1/sessions/{session_id}"): _DELETE,
    ("DELETE", "/v1/session/{session_id}"): _DELETE,
    ("GET", "/v1/sessions/{session_id}/events"): Operation(
        "the log, paged (newest first by default)",
        {"200": (EventPage, _JSON, "one page of stamped frames")},
        params=(
            Param("order", {"type": "string", "enum": ["asc", "desc"]}, "default desc"),
            Param("after_seq", _int(0, _MAX_SEQ), "exclusive lower bound (default 0)"),
            Param("before_seq", _int(0, _MAX_SEQ), "exclusive upper bound"),
            Param("limit", _int(1, 1000), "page size (default 100)"),
        ),
    ),
    ("POST", "/v1/sessions/{session_id}/events"): Operation(
        "append user.message, control.cancel or control.interaction.response as an edge",
        {"201": _APPENDED, "200": _AGAIN},
        body=AppendBody,
        body_required=True,
    ),
    ("GET", "/v1/sessions/{session_id}/events/stream"): Operation(
        "the log as Server-Sent Events (id: seq), resumable; ends with session.deleted",
        {"200": (None, "text/event-stream", "one event per log entry, then live")},
        events=(
            SseEvent(
                "<frame type>",
                StampedEvent,
                "one per log entry: event is its frame type, id its seq, data the stamped frame",
            ),
            SseEvent(
                "stream.gap",
                StreamGap,
                "no id: retention trimmed from_seq..to_seq under the cursor; the stream goes "
                "on after to_seq",
            ),
            SseEvent(
                "stream.reset",
                StreamReset,
                "no id: the cursor (Last-Event-ID or after_seq) is past this log's head; the "
                "stream goes on from head_seq",
            ),
        ),
        params=(
            Param("after_seq", _int(0, _MAX_SEQ), "start after this seq (default: the head)"),
            Param("access_token", {"type": "string"}, "the credential, for EventSource"),
            Param("Last-Event-ID", {"type": "string"}, "resume after this seq", "header"),
        ),
    ),
    ("POST", "/v1/sessions/{session_id}/cancel"): Operation(
        "control.cancel for the named turn, else the open one",
        {"201": _APPENDED, "200": _AGAIN},
        body=CancelBody,
    ),
    ("POST", "/v1/sessions/{session_id}/tokens"): Operation(
        "issue a session token (API keys only; the secret is shown once)",
        {"201": (TokenOut, _JSON, "the token")},
        body=TokenBody,
        tags=("credentials",),
    ),
    ("POST", "/v1/sessions/{session_id}/fork"): Operation(
        "a new session holding a copy of seqs 1..at_seq (API keys only)",
        {"201": _CREATED, "200": _EXISTING},
        body=ForkBody,
    ),
    ("POST", "/v1/sessions/{session_id}/continue"): Operation(
        "carry an ended session on: a new live session (parent: the ended one) holding its "
        "whole log; 409 not_ended on a live session; a named session_id makes it idempotent "
        "(API keys only)",
        {"201": _CREATED, "200": _EXISTING},
        body=ContinueBody,
    ),
    ("GET", "/v1/sessions/{session_id}/export"): Operation(
        "the whole log (json) or a Markdown transcript (md), as an attachment",
        {"200": (ExportAnswer, (_JSON, "text/markdown"), "format=json, or md: a transcript")},
        params=(Param("format", {"type": "string", "enum": ["json", "md"]}, "default json"),),
    ),
    ("DELETE", "/v1/tokens/{token_id}"): Operation(
        "revoke a session token (an API key: any of its workspace; a token: itself)",
        {"200": (RevokeAnswer, _JSON, "revoked (again: still 200)")},
        tags=("credentials",),
    ),
    ("POST", "/v1/keys"): Operation(
        "create an API key of the admin key's workspace (admin scope; the secret is shown once)",
        {"201": (KeyOut, _JSON, "the key, with its secret in `key`")},
        body=KeyBody,
        body_required=True,
        tags=("credentials",),
        problems=("400", "401", "403"),
    ),
    ("GET", "/v1/keys"): Operation(
        "the workspace's live API keys: scopes, created, expires, last used (admin scope)",
        {"200": (KeyList, _JSON, "the keys")},
        tags=("credentials",),
        problems=("401", "403"),
    ),
    ("DELETE", "/v1/keys/{key_id}"): Operation(
        "revoke an API key (admin scope; not itself, not the last admin key, not a flag's)",
        {"200": (KeyRevoked, _JSON, "revoked (again: still 200)")},
        tags=("credentials",),
        problems=("401", "403", "404", "409"),
    ),
    ("GET", "/v1/whoami"): Operation(
        "what the presented credential is and may do",
        {"200": (WhoAmI, _JSON, "the credential")},
        tags=("credentials",),
    ),
    ("GET", "/healthz"): Operation(
        "liveness", {"200": (Health, _JSON, "alive")}, auth="none", tags=("ops",), problems=()
    ),
    ("GET", "/readyz"): Operation(
        "readiness: the store answers",
        {"200": (Health, _JSON, "ready")},
        auth="none",
        tags=("ops",),
        problems=("503",),
    ),
    ("GET", "/metrics"): Operation(
        "Prometheus metrics",
        {"200": (None, "text/plain", "the exposition format")},
        auth="none",
        tags=("ops",),
        problems=(),
    ),
    ("GET", "/openapi.json"): Operation(
        "this document",
        {"200": (None, _JSON, "OpenAPI 3.1")},
        auth="none",
        tags=("ops",),
        problems=(),
    ),
    ("GET", "/"): Operation(
        "the dashboard",
        {"200": (None, "text/html", "the page")},
        auth="none",
        tags=("dashboard",),
        problems=(),
    ),
    ("GET", "/config.json"): Operation(
        "the dashboard's configuration",
        {"200": (DashboardConfig, _JSON, "where its WebSocket goes")},
        auth="none",
        tags=("dashboard",),
        problems=(),
    ),
    ("POST", "/v1/sessions/{session_id}/ag-ui"): Operation(
        "run the session as an AG-UI agent: the input's new user messages become user.message "
        "frames; answers the run as AG-UI events (docs/ag-ui.md)",
        {"200": (None, "text/event-stream", "AG-UI events until the run ends (id: seq)")},
        foreign_body=_run_agent_input_schema,
        body_required=True,
        tags=("ag-ui",),
        problems=("400", "401", "404", "409", "413", "415", "429"),
    ),
    ("GET", "/v1/sessions/{session_id}/ag-ui"): Operation(
        "the session as AG-UI events: a MESSAGES_SNAPSHOT folded from the log, then live",
        {"200": (None, "text/event-stream", "AG-UI events (id: seq), resumable")},
        params=(
            Param("until", {"type": "string", "enum": ["run_end"]}, "end with the open run"),
            Param("access_token", {"type": "string"}, "the credential, for EventSource"),
            Param("last_event_id", {"type": "string"}, "resume after this event id"),
            Param("Last-Event-ID", {"type": "string"}, "resume after this event id", "header"),
        ),
        tags=("ag-ui",),
        problems=("400", "401", "404"),
    ),
    ("GET", "/static/{name}"): Operation(
        "one file of the dashboard",
        {"200": (None, "application/octet-stream", "the file")},
        auth="none",
        tags=("dashboard",),
        problems=("404",),
    ),
}
"""(method, path template) → what the document says about it."""

_PATH_PARAM: Final = {"type": "string", "minLength": 1}


def _routes(app: web.Application) -> list[tuple[str, str]]:
    """(method, path template) of every route of ``app`` but the automatic HEAD ones."""
    found = []
    for route in app.router.routes():
        if route.method in ("HEAD", "*"):
            continue
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter")
        if path:
            found.append((route.method, str(path)))
    return found


def describe(app: web.Application) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``app``'s routes. Raises KeyError for an undescribed one."""
    routes = _routes(app)
    undescribed = [r for r in routes if r not in OPERATIONS]
    if undescribed:
        raise KeyError(f"routes without an OpenAPI description: {undescribed}")
    models: set[type[Any]] = {Problem}
    for method, path in routes:
        op = OPERATIONS[method, path]
        if op.body is not None:
            models.add(op.body)
        models.update(m for m, _media, _desc in op.answers.values() if m is not None)
        models.update(event.data for event in op.events)
    ordered = sorted(models, key=lambda m: m.__name__)
    refs, components = msgspec.json.schema_components(
        ordered, ref_template="#/components/schemas/{name}"
    )
    ref_of = dict(zip(ordered, refs, strict=True))
    foreign: dict[tuple[str, str], dict[str, Any]] = {}
    for method, path in routes:
        op = OPERATIONS[method, path]
        if op.foreign_body is not None:
            schema = op.foreign_body("#/components/schemas/{model}")
            components.update(schema.pop("$defs", {}))
            name = str(schema.get("title", "Body"))
            components[name] = schema
            foreign[method, path] = {"$ref": f"#/components/schemas/{name}"}
    paths: dict[str, dict[str, Any]] = {}
    for method, path in sorted(routes, key=lambda r: (r[1], r[0])):
        paths.setdefault(path, {})[method.lower()] = _operation(
            method, path, OPERATIONS[method, path], ref_of, foreign.get((method, path))
        )
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "RAWP master relay HTTP API",
            "version": PROTOCOL_VERSION,
            "description": "REST, SSE and the dashboard of a RAWP master (docs/http-api.md). "
            "Errors are application/problem+json.",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "an API key (rk_…) or a session token (st_…)",
                }
            },
        },
    }


def _operation(
    method: str,
    path: str,
    op: Operation,
    ref_of: dict[type[Any], dict[str, Any]],
    foreign_body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": _PATH_PARAM}
        for name in _path_names(path)
    ]
    parameters += [
        {"name": p.name, "in": p.where, "required": False, "schema": p.schema,
         "description": p.description}
        for p in op.params
    ]  # fmt: skip
    responses: dict[str, Any] = {}
    for status, (model, media, description) in op.answers.items():
        kinds = (media,) if isinstance(media, str) else media
        content: dict[str, Any] = {
            kind: {"schema": ref_of[model]} if model is not None and i == 0 else {}
            for i, kind in enumerate(kinds)
        }
        responses[status] = {"description": description, "content": content}
        if op.events and status == "200":
            names = ", ".join(event.name for event in op.events)
            responses[status]["description"] = f"{description}; events: {names}"
            responses[status]["x-sse-events"] = {
                event.name: {"description": event.description, "data": ref_of[event.data]}
                for event in op.events
            }
    for status in op.problems:
        if status not in responses:
            responses[status] = {
                "description": "a problem (RFC 9457)",
                "content": {"application/problem+json": {"schema": ref_of[Problem]}},
            }
    operation: dict[str, Any] = {
        "operationId": _operation_id(method, path),
        "summary": op.summary,
        "tags": list(op.tags),
        "responses": responses,
    }
    if parameters:
        operation["parameters"] = parameters
    if op.body is not None or foreign_body is not None:
        body_schema = ref_of[op.body] if op.body is not None else foreign_body
        operation["requestBody"] = {
            "required": op.body_required,
            "content": {_JSON: {"schema": body_schema}},
        }
    operation["security"] = [{"bearer": []}] if op.auth == "credential" else []
    return operation


def _path_names(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{") and part.endswith("}")]


def _operation_id(method: str, path: str) -> str:
    words = [p.strip("{}").replace(".", "_") for p in path.split("/") if p] or ["root"]
    return method.lower() + "_" + "_".join(words)


OPENAPI_DOCUMENT: Final = web.AppKey("openapi_document", dict)
"""The application's cache: empty until the first request (the route table is final then)."""


def add_openapi_route(app: web.Application) -> None:
    """Register ``GET /openapi.json`` on ``app``."""
    app[OPENAPI_DOCUMENT] = {}
    app.router.add_get("/openapi.json", openapi_document)


async def openapi_document(request: web.Request) -> web.Response:
    """``GET /openapi.json``: the document, generated once per application."""
    cache: dict[str, Any] = request.app[OPENAPI_DOCUMENT]
    if not cache:
        cache.update(describe(request.app))
    return json_response(cache, headers={"Cache-Control": "no-cache"})
