"""GET /openapi.json: generated from the route table and the models; Schemathesis finds no
5xx and no answer that differs from it; the docs' error codes are the server's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from protocol import errors as protocol_errors
from relay.http.openapi import OPERATIONS, describe
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.support.api_fuzz import fuzz_api

from .conftest import Api

REPO = Path(__file__).resolve().parents[3]


async def test_the_document_covers_every_route_and_only_those(api: Api, master: Master) -> None:
    """Every route of the live application is in the document, and every operation declared
    for the document is a live route (nothing written by hand that could drift)."""
    reply = await api.get("/openapi.json", token=None)
    assert reply.status == 200
    document = reply.body
    assert document["openapi"] == "3.1.0"
    listed = {(m.upper(), p) for p, ops in document["paths"].items() for m in ops}
    assert listed == set(OPERATIONS)
    assert "SessionOut" in document["components"]["schemas"]
    append = document["paths"]["/v1/sessions/{session_id}/events"]["post"]
    assert append["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/AppendBody"
    }


def test_an_undescribed_route_is_refused() -> None:
    """describe() raises for a route OPERATIONS does not cover, so none can be left out."""
    from aiohttp import web

    app = web.Application()

    async def handler(request: web.Request) -> web.Response:
        return web.Response()

    app.router.add_get("/v1/new-thing", handler)
    with pytest.raises(KeyError, match="new-thing"):
        describe(app)


async def test_schemathesis_finds_no_server_error_and_no_undocumented_answer(
    master: Master, tmp_path: Path
) -> None:
    """A short Schemathesis run (coverage, fuzzing, stateful; fixed seed) from the document."""
    code, output = await fuzz_api(master.http_url, API_KEY, max_examples=8, workdir=tmp_path)
    assert code == 0, output[-6000:]
    assert "passed" in output


async def test_bad_append_bodies_answer_the_documented_codes(api: Api) -> None:
    """Not the route's JSON: invalid_body; a payload that does not fit its type: invalid_frame."""
    await api.create("s-codes")
    path = "/v1/sessions/s-codes/events"
    assert (await api.call("POST", path, data=b"not json")).problem["code"] == "invalid_body"
    assert (await api.post(path, {"payload": {}})).problem["code"] == "invalid_body"
    bad = {"type": "user.message", "payload": {"text": 5}}
    assert (await api.post(path, bad)).problem["code"] == "invalid_frame"


def test_every_error_code_in_the_http_docs_is_one_the_server_answers() -> None:
    """Each `STATUS code` pair of docs/http-api.md names a code the server can produce."""
    text = (REPO / "docs" / "http-api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`[45]\d\d ([a-z_]+)`", text))
    assert "invalid_body" in documented
    source = "\n".join(p.read_text() for p in (REPO / "relay").rglob("*.py"))
    produced = set(re.findall(r'code="([a-z_]+)"', source))
    produced |= {
        str(getattr(cls, "code", ""))
        for cls in vars(protocol_errors).values()
        if isinstance(cls, type) and issubclass(cls, protocol_errors.RawpError)
    }
    assert documented <= produced, sorted(documented - produced)


async def test_the_sse_stream_names_its_event_kinds(api: Api) -> None:
    """The events stream lists stream.gap and stream.reset beside the log's frames."""
    document = (await api.get("/openapi.json", token=None)).body
    answer = document["paths"]["/v1/sessions/{session_id}/events/stream"]["get"]["responses"]
    events = answer["200"]["x-sse-events"]
    assert {"stream.gap", "stream.reset"} <= set(events)
    assert "stream.gap" in answer["200"]["description"]
    assert "stream.reset" in answer["200"]["description"]
    schemas = document["components"]["schemas"]
    gap = schemas[events["stream.gap"]["data"]["$ref"].rsplit("/", 1)[1]]
    assert set(gap["properties"]) == {"from_seq", "to_seq", "reason"}
    reset = schemas[events["stream.reset"]["data"]["$ref"].rsplit("/", 1)[1]]
    assert set(reset["properties"]) == {"reason", "last_event_id", "head_seq"}
