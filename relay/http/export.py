"""``GET /v1/sessions/{id}/export?format=json|md`` (seed 001: export before you delete).

* ``json`` (default): ``{"session": …, "exported_at": …, "events": [every stamped envelope
  in seq order]}`` — the whole log, the same bytes the events route serves.
* ``md``: a readable transcript (:mod:`relay.http.transcript`).

Both are sent as attachments named after the session.
"""

from __future__ import annotations

from aiohttp import web

from protocol import codec

from .access import hub_of, loaded_session, principal_of, require_act, visible_header
from .middleware import ApiError
from .sessions import describe
from .transcript import cost_text, counted, render_markdown, view_of

__all__ = ["export_session"]


async def export_session(request: web.Request) -> web.Response:
    """``GET /v1/sessions/{session_id}/export``."""
    hub = hub_of(request)
    principal = await principal_of(request)
    header = await visible_header(request, principal)
    require_act(principal, "export")
    fmt = request.query.get("format", "json")
    if fmt not in ("json", "md"):
        raise ApiError(400, f"format must be json or md, got {fmt!r}", code="invalid_query")
    session = await loaded_session(request, header)
    entries = await hub.store.read(session.id)
    info = await describe(hub, session, header)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in session.id)
    disposition = {"Content-Disposition": f'attachment; filename="{safe}.{fmt}"'}
    if fmt == "json":
        prefix = codec.encode_json({"session": info, "exported_at": codec.format_time(codec.now())})
        body = b'%s,"events":[%s]}' % (prefix[:-1], b",".join(e.data for e in entries))
        return web.Response(body=body, content_type="application/json", headers=disposition)
    view = view_of(session.id, entries)
    usage = info.usage
    cost = cost_text(usage.cost_used, usage.cost_unit)
    meta = [
        ("Session", f"`{session.id}`"),
        ("Created", info.created_at),
        ("Status", info.status),
        (
            "Usage",
            f"{usage.input_tokens} input / {usage.output_tokens} output tokens"
            + (f", {cost}" if cost is not None else "")
            + f" — {counted(usage.turns_completed, 'turn')}",
        ),
    ]
    if info.parent_session_id:
        meta.append(
            ("Forked from", f"`{info.parent_session_id}` (first {info.seed_length} events)")
        )
    text = render_markdown(view, meta, title=session.header.name)
    return web.Response(
        text=text, content_type="text/markdown", charset="utf-8", headers=disposition
    )
