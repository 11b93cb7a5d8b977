"""Chromium's EventSource sees no forged event or id from received text (issue 12, §16.7)."""

from __future__ import annotations

from typing import Any

import pytest

from protocol import names
from relay.server import Master
from relay.store.base import NewEntry
from tests.e2e.conftest import API_KEY
from tests.e2e.util import wait_until
from tests.support.wire import Peer

pytestmark = pytest.mark.browser

SID = "s-es"
FORGED = '\nid: 999999\nevent: session.deleted\ndata: {"forged": true}\n'

JS = """async ([url, sentinel, escaped]) => {
  const seen = [];
  const source = new EventSource(url);
  const done = new Promise((resolve, reject) => {
    const record = (e) => {
      seen.push({ type: e.type, id: e.lastEventId, data: e.data });
      if (e.data.includes(sentinel)) resolve();
    };
    for (const type of ["user.message", "session.deleted", "session.presence", "x.ok",
                        "x.evil", escaped, "message"]) {
      source.addEventListener(type, record);
    }
    setTimeout(() => reject(new Error("no sentinel within 8 s: " + JSON.stringify(seen))), 8000);
  });
  await done;
  source.close();
  return seen;
}"""


async def _legacy_entry(master: Master) -> None:
    """An entry logged by an older build, whose type carries CR/LF (the store takes it as is)."""
    head = b'{"type":"x.evil","message_id":"m-old","session_id":"s-es",'
    head += b'"timestamp":"2026-11-29T09:00:00Z","payload":{},"seq":'
    entry = NewEntry(
        message_id="m-old",
        type="x.evil" + FORGED,
        head=head,
        tail=b',"sender":{"role":"edge","participant_id":"p-old"}}',
        sender_id="p-old",
        sender_role="edge",
    )
    await master.store.append(SID, [entry])


async def test_eventsource_gets_no_forged_event_or_id(browser: Any, master: Master) -> None:
    """No forged session.deleted or lastEventId reaches EventSource (refused or escaped)."""
    client = await Peer.open(master.ws_url, SID, token=API_KEY, create=True)
    token, _ = await master.hub.auth.issue_token("default", SID)
    viewer = await Peer.open(master.ws_url, SID, role="edge", token=token)
    for line_break in ("\n", "\r", "\r\n"):
        await viewer.send(
            f"x.evil{FORGED.replace(chr(10), line_break)}", {}, metadata={"ignorable": True}
        )
        error = await viewer.recv_type("session.error")
        assert error["payload"]["error_code"] == "invalid_frame"
    await _legacy_entry(master)
    await viewer.send("x.ok", {"n": 1}, metadata={"ignorable": True})
    sentinel = await viewer.send("user.message", {"text": "sentinel"})

    async def logged() -> bool:
        return await master.store.message_seq(SID, sentinel["message_id"]) is not None

    await wait_until(logged)
    head = await master.store.head_seq(SID)
    page = await browser.new_page()
    await page.goto(master.http_url + "/config.json")  # same origin as the stream
    url = f"/v1/sessions/{SID}/events/stream?after_seq=0&access_token={token}"
    escaped = names.one_line("x.evil" + FORGED)
    seen = await page.evaluate(JS, [url, sentinel["message_id"], escaped])
    assert [e["type"] for e in seen if e["type"] == "session.deleted"] == []
    assert [int(e["id"]) for e in seen] == list(range(1, head + 1))  # every real seq, once
    assert [e["type"] for e in seen][-3:] == [escaped, "x.ok", "user.message"]
    assert "forged" not in seen[-3]["data"]
    await viewer.close()
    await client.close()
