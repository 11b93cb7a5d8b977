"""RFC 9457 problem details: every HTTP error is ``application/problem+json``."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from protocol import codec, names
from protocol.errors import (
    BadCredential,
    Forbidden,
    FormatVersionError,
    RawpError,
    SessionMissing,
    StoreError,
)

from ..faults import reported, shown

__all__ = [
    "inert_json",
    "problem",
    "problem_for_http_error",
    "problem_from_error",
    "problem_middleware",
]

_STATUS_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    410: "Gone",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


# The machine-readable ``code`` of aiohttp's own refusals (router, parser), so every error
# body has one (docs/http-api.md).
_STATUS_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    408: "timeout",
    413: "too_large",
    415: "unsupported_media_type",
}


def problem_for_http_error(request: web.Request, exc: web.HTTPException) -> web.Response:
    """aiohttp's own HTTP error (the router's 404/405, the parser's 400…) as problem+json."""
    return problem(exc.status, exc.reason, code=_STATUS_CODES.get(exc.status))


def problem(status: int, detail: str, *, code: str | None = None, **extra: Any) -> web.Response:
    """A problem+json response.

    ``detail`` may quote what a caller sent (a path's id, a body's value): its control
    characters are written as escapes (one line in any log or terminal it reaches), and the
    body's ``<``, ``>`` and ``&`` are JSON escapes, so no browser that sniffs it finds markup.
    """
    body: dict[str, Any] = {
        "type": f"https://rawp.dev/problems/{code or status}",
        "title": _STATUS_TITLES.get(status, "Error"),
        "status": status,
        "detail": names.one_line(detail),
    }
    if code is not None:
        body["code"] = code
    body.update(extra)
    return web.Response(
        status=status,
        body=inert_json(codec.encode_json(body)),
        content_type="application/problem+json",
        headers={"X-Content-Type-Options": "nosniff"},
    )


def inert_json(raw: bytes) -> bytes:
    """Compact JSON with ``<``, ``>``, ``&`` written as ``\\u`` escapes: the same value to a
    JSON reader (outside strings compact JSON never holds them), no markup to anything else."""
    return raw.replace(b"<", b"\\u003c").replace(b">", b"\\u003e").replace(b"&", b"\\u0026")


def problem_from_error(exc: RawpError) -> web.Response:
    """Map a RAWP error to its HTTP status."""
    if isinstance(exc, BadCredential):
        return problem(401, exc.message, code="bad_credential")
    if isinstance(exc, Forbidden):
        return problem(403, exc.message, code="not_allowed")
    if isinstance(exc, SessionMissing):  # deleted meanwhile (e.g. by another node)
        return problem(404, exc.message, code="not_found")
    if isinstance(exc, FormatVersionError):
        return problem(503, shown(exc), code="version_unsupported")
    if isinstance(exc, StoreError):
        # An outage under a request no handler wrapped (a session loaded for a read): the
        # store's fault, retryable — never the client's 400; its text stays in the log.
        return problem(503, reported(exc), code="store_unavailable")
    code = getattr(exc, "code", None)
    status = 503 if code == "store_unavailable" else 400
    return problem(status, exc.message, code=code)


@web.middleware
async def problem_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Turn RAWP errors and aiohttp's HTTP errors into problem+json."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except RawpError as exc:
        return problem_from_error(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return problem_for_http_error(request, exc)
