"""The dashboard's list, inspector, themes, narrow layout, keyboard, archived and XSS views."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from relay.server import Master
from tests.browser.test_dashboard import Shoot, agent, clean, expect, new_page, open_dashboard
from tests.e2e.conftest import API_KEY
from tests.e2e.util import hello, hello_close_code
from tests.support.wire import Peer, new_turn_id, usage_payload

pytestmark = pytest.mark.browser


async def scripted_turn(client: Peer, index: int, text: str, *, tools: int = 1) -> None:
    """One complete turn: text, tool calls, end, usage."""
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": index})
    await client.send("agent.text.delta", {"block_id": f"t{index}", "delta": text})
    await client.send("agent.text.done", {"block_id": f"t{index}"})
    for n in range(tools):
        call = f"c{index}-{n}"
        await client.send(
            "tool.invoke.request", {"call_id": call, "tool_name": "grep", "input": {"n": n}}
        )
        await client.send("tool.invoke.result", {"call_id": call, "status": "ok", "output": n})
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    usage = usage_payload(turn)
    usage["token_usage"] = {"input_tokens": 100 * (index + 1), "output_tokens": 40 + index}
    usage["cost_usage"] = {"limit": -1, "used": 0.01 * (index + 1), "unit": "USD"}
    await client.send("session.usage", usage)


async def test_session_list_search_filters_sort_and_counts(
    browser: Any, make_master: Callable[..., Any], shoot: Shoot
) -> None:
    """Search by id and name, filter by status and agent connection, sort by activity, counts."""
    master: Master = await make_master(reattach_window_s=60.0)
    alpha = await agent(master, "s-alpha", "Alpha build")
    beta = await agent(master, "s-beta", "Beta deploy")
    await beta.send(
        "agent.interaction.request",
        {"interaction_id": "i1", "kind": "confirmation", "prompt": "Deploy?"},
    )
    gamma = await agent(master, "s-gamma", "Gamma notes")
    await gamma.close()  # detached: the reattach window is long
    page = await new_page(browser)
    await page.goto(f"{master.http_url}/?token={API_KEY}")
    items = page.locator(".session-item")
    await expect(items).to_have_count(3)
    await expect(
        page.locator(".session-item[data-id='s-gamma'] .presence-summary")
    ).to_contain_text("agent detached")
    await expect(page.locator("#session-counts")).to_have_text(
        "3 of 3 sessions · 1 need action · 2 idle"
    )
    await page.fill("#session-search", "beta")
    await expect(items).to_have_count(1)
    await expect(items.locator(".name")).to_have_text("Beta deploy")
    await page.fill("#session-search", "S-GAM")  # by id, any case
    await expect(items.locator(".name")).to_have_text("Gamma notes")
    await expect(page.locator("#session-counts")).to_contain_text("1 of 3 sessions")
    await page.fill("#session-search", "nothing like it")
    await expect(items).to_have_count(0)
    await expect(page.locator("#sessions-empty")).to_have_text("No session matches.")
    await page.fill("#session-search", "")
    await page.select_option("#filter-status", "requires_action")
    await expect(items.locator(".name")).to_have_text(["Beta deploy"])
    await page.select_option("#filter-status", "all")
    await page.select_option("#filter-conn", "detached")
    await expect(items.locator(".name")).to_have_text(["Gamma notes"])
    await page.select_option("#filter-conn", "attached")
    await expect(items).to_have_count(2)
    await page.select_option("#filter-conn", "all")
    await page.select_option("#filter-archived", "archived")
    await expect(items).to_have_count(0)
    await page.select_option("#filter-archived", "all")
    await page.select_option("#sort", "name")
    await expect(items.locator(".name")).to_have_text(["Alpha build", "Beta deploy", "Gamma notes"])
    await page.select_option("#sort", "activity")
    await expect(items.first.locator(".name")).to_have_text("Gamma notes")  # the newest
    await alpha.send("agent.state", {"state": "thinking"})  # activity in Alpha
    await expect(items.first.locator(".name")).to_have_text("Alpha build")
    await shoot(page, "session-list")
    await clean(page)
    await alpha.close()
    await beta.close()


async def test_inspector_filters_by_type_and_links_each_seq(
    browser: Any, master: Master, shoot: Shoot
) -> None:
    """The raw events: seq, type, sender, time, JSON; a type filter; a link per seq."""
    client = await agent(master, "s-events", "Inspect me")
    page = await open_dashboard(browser, master, "s-events")
    await scripted_turn(client, 0, "Looking.", tools=2)
    await expect(page.locator(".block.usage")).to_have_count(1)
    await page.keyboard.press("e")  # the events tab from the keyboard
    await expect(page.locator("#tab-events")).to_have_attribute("aria-selected", "true")
    assert page.url.endswith("#/s/s-events/events")
    rows = page.locator("#events .event-row")
    seqs = await page.evaluate("window.rawp.current.frames.map((f) => f.seq)")
    await expect(rows).to_have_count(len(seqs))
    request = rows.filter(has_text="tool.invoke.request").first
    await expect(request.locator(".ev-sender")).to_contain_text("client · p-")
    await expect(request.locator("time.ev-time")).to_have_text(
        re.compile(r"^\d\d:\d\d:\d\d\.\d{3}$")
    )
    await page.select_option("#event-type", "tool.invoke.result")
    await expect(rows).to_have_count(2)
    await expect(rows.locator(".ev-type")).to_have_text(["tool.invoke.result"] * 2)
    await expect(page.locator("#events-count")).to_have_text("2 events of type tool.invoke.result")
    await rows.first.locator(".ev-json summary").click()
    await expect(rows.first.locator(".ev-json .json")).to_contain_text("call_id")
    await page.select_option("#event-type", "")
    await page.keyboard.press("t")
    await expect(page.locator("#timeline-panel")).to_be_visible()
    # A block's seq link opens that frame in the inspector, highlighted, its JSON open.
    link = page.locator(".block.tool_call .seq-link").first
    seq = int((await link.text_content() or "#0")[1:])
    await link.click()
    assert page.url.endswith(f"#/s/s-events/events/{seq}")
    target = page.locator(f"#event-{seq}")
    await expect(target).to_have_class(re.compile(r"\btargeted\b"))
    await expect(target.locator(".ev-type")).to_have_text("tool.invoke.request")
    await expect(target.locator(".ev-json")).to_have_attribute("open", "")
    await expect(target.locator(".ev-json .json")).to_contain_text("grep")
    # The link works from a fresh page too.
    second = await new_page(browser)
    await second.goto(f"{master.http_url}/?token={API_KEY}#/s/s-events/events/{seq}")
    await expect(second.locator(f"#event-{seq}")).to_have_class(re.compile(r"\btargeted\b"))
    await shoot(page, "inspector")
    await clean(page)
    await clean(second)
    await client.close()


async def test_dark_mode_follows_the_system_and_the_toggle(
    browser: Any, master: Master, shoot: Shoot
) -> None:
    """Dark when the system prefers it; the toggle forces dark or light and is remembered."""
    client = await agent(master, "s-dark", "Night shift")
    await scripted_turn(client, 0, "Working **late**.")
    page = await new_page(browser)
    await page.emulate_media(color_scheme="dark")
    await page.goto(f"{master.http_url}/?token={API_KEY}#/s/s-dark")
    await expect(page.locator("#conn-status")).to_have_attribute("data-state", "live")
    background = "getComputedStyle(document.body).backgroundColor"
    assert await page.evaluate(background) == "rgb(18, 21, 28)"
    await expect(page.locator("#theme-toggle")).to_have_text("Theme: System")
    await shoot(page, "dark-mode")
    await page.emulate_media(color_scheme="light")
    assert await page.evaluate(background) == "rgb(246, 247, 249)"
    await page.click("#theme-toggle")
    await expect(page.locator("#theme-toggle")).to_have_text("Theme: Dark")
    assert await page.evaluate(background) == "rgb(18, 21, 28)"
    await page.click("#theme-toggle")
    await expect(page.locator("#theme-toggle")).to_have_text("Theme: Light")
    await page.emulate_media(color_scheme="dark")
    assert await page.evaluate(background) == "rgb(246, 247, 249)"
    await page.reload()
    await expect(page.locator("#theme-toggle")).to_have_text("Theme: Light")
    await clean(page)
    await client.close()


async def test_layout_at_400_px(browser: Any, master: Master, shoot: Shoot) -> None:
    """At 400 px nothing overflows sideways; the session list folds behind a button."""
    client = await agent(master, "s-narrow", "A rather long session name for a narrow screen")
    await scripted_turn(client, 0, "Narrow text with `code` and a long_unbroken_identifier_here.")
    page = await new_page(browser)
    await page.set_viewport_size({"width": 400, "height": 800})
    await page.goto(f"{master.http_url}/?token={API_KEY}#/s/s-narrow")
    await expect(page.locator("#conn-status")).to_have_attribute("data-state", "live")
    await expect(page.locator("#conn-status")).to_be_visible()  # connection always visible
    await expect(page.locator(".block.tool_call")).to_have_count(1)
    await expect(page.locator("#sidebar")).to_be_hidden()
    assert await page.evaluate("document.documentElement.scrollWidth") <= 400
    for selector in (".block.turn", ".block.tool_call", "#usage-chart", "#composer"):
        box = await page.locator(selector).first.bounding_box()
        assert box is not None, selector
        assert box["x"] >= 0, selector
        assert box["x"] + box["width"] <= 400, selector
    await shoot(page, "narrow-400px")
    await page.click("#sidebar-toggle")
    await expect(page.locator("#sidebar")).to_be_visible()
    await expect(page.locator(".session-item")).to_have_count(1)
    assert await page.evaluate("document.documentElement.scrollWidth") <= 400
    await page.click("#tab-events")
    await expect(page.locator("#events .event-row").first).to_be_visible()
    assert await page.evaluate("document.documentElement.scrollWidth") <= 400
    await clean(page)
    await client.close()


async def test_keyboard_alone_finds_opens_and_answers(browser: Any, master: Master) -> None:
    """'/' finds a session, Tab and Enter open it, an interaction is answered by keyboard."""
    client = await agent(master, "s-keys", "Keyboard session")
    await client.send(
        "agent.interaction.request",
        {"interaction_id": "k1", "kind": "confirmation", "prompt": "Proceed?"},
    )
    page = await new_page(browser)
    await page.goto(f"{master.http_url}/?token={API_KEY}")
    await expect(page.locator(".session-item")).to_have_count(1)
    await page.keyboard.press("/")
    assert await page.evaluate("document.activeElement.id") == "session-search"
    await page.keyboard.type("keyboard")
    await page.keyboard.press("Escape")
    await page.locator(".session-item a").focus()
    await page.keyboard.press("Enter")
    await expect(page.locator("#conn-status")).to_have_attribute("data-state", "live")
    yes = page.locator(".block.interaction button", has_text="Yes")
    await yes.focus()
    await page.keyboard.press("Enter")
    answer = await client.recv_type("control.interaction.response")
    assert answer["payload"] == {"interaction_id": "k1", "response": True}
    await expect(page.locator(".block.interaction .ask-answer")).to_have_text("answered: yes")
    await page.keyboard.press("e")  # the page's own frame is in the inspector, marked
    sent = page.locator("#events .event-row.sent")
    await expect(sent.locator(".ev-type")).to_have_text("control.interaction.response")
    await expect(sent.locator(".ev-sender")).to_have_text("this page (sent)")
    await clean(page)
    await client.close()


async def test_withdrawn_question_is_removed(browser: Any, master: Master) -> None:
    """agent.interaction.cancel (§16.4) relayed by the master removes the prompt and its buttons."""
    client = await agent(master, "s-withdraw", "Withdrawal")
    page = await open_dashboard(browser, master, "s-withdraw")
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send(
        "agent.interaction.request",
        {"interaction_id": "w1", "kind": "confirmation", "prompt": "Apply the patch?"},
    )
    ask = page.locator(".block.interaction")
    await expect(ask.locator("button")).to_have_count(2)
    await expect(page.locator("#session-status")).to_have_text("requires action")
    await client.send(
        "agent.interaction.cancel", {"interaction_id": "w1", "reason": "no answer within 30 s"}
    )
    await expect(ask).to_have_count(0)
    await expect(page.locator(".block.interaction button")).to_have_count(0)
    await expect(page.locator("#session-status")).to_have_text("running")
    assert await page.evaluate(
        "window.rawp.view.blocks.filter((b) => b.kind === 'interaction').map((b) => b.status)"
    ) == ["withdrawn"]
    # The withdrawal is in the log: a page opened afterwards never shows the prompt.
    second = await open_dashboard(browser, master, "s-withdraw")
    await expect(second.locator(".block.turn")).to_have_count(1)
    await expect(second.locator(".block.interaction")).to_have_count(0)
    await expect(second.locator("#session-status")).to_have_text("running")
    await clean(page)
    await clean(second)
    await client.close()


async def test_archived_session_opens_read_only(browser: Any, master: Master, shoot: Shoot) -> None:
    """A session its client ended with a fatal error (§16.1): listed as archived, read-only."""
    sid = "s-archived"
    client = await agent(master, sid, "Last week's run")
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("agent.text.delta", {"block_id": "t1", "delta": "Archived **answer**."})
    await client.send("agent.text.done", {"block_id": "t1"})
    await client.send(
        "tool.invoke.request", {"call_id": "c1", "tool_name": "grep", "input": {"q": "x"}}
    )
    await client.send("tool.invoke.result", {"call_id": "c1", "status": "ok", "output": 3})
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    await client.send(
        "session.error", {"error_code": "unrecoverable", "message": "bye", "fatal": True}
    )
    assert await client.closed_with() == 1000
    assert await hello_close_code(master, hello(sid, role="edge")) == 4410  # no attaching
    live = await agent(master, "s-current", "Current run")
    page = await new_page(browser)
    sockets: list[str] = []
    page.on("websocket", lambda ws: sockets.append(ws.url))
    await page.goto(f"{master.http_url}/?token={API_KEY}")
    await expect(page.locator(".session-item")).to_have_count(2)
    await expect(page.locator("#session-counts")).to_contain_text("1 archived")
    await page.select_option("#filter-archived", "archived")
    await expect(page.locator(".session-item .name")).to_have_text(["Last week's run"])
    await expect(page.locator(".session-item .badge")).to_have_text("archived")
    await expect(page.locator(".session-item .presence-summary")).to_contain_text("ended")
    await page.select_option("#filter-archived", "live")
    await expect(page.locator(".session-item .name")).to_have_text(["Current run"])
    await page.select_option("#filter-archived", "all")
    await page.click(f".session-item[data-id='{sid}'] a")
    await expect(page.locator("#conn-status")).to_have_attribute("data-state", "read-only")
    await expect(page.locator("#ended")).to_contain_text("Archived session: read-only.")
    await expect(page.locator("#ended")).to_contain_text("error")
    await expect(page.locator(".block.text .md strong")).to_have_text("answer")
    await expect(page.locator(".block.text .md")).to_have_text("Archived answer.")
    await expect(page.locator(".block.tool_call .tool-status")).to_have_text("ok")
    await expect(page.locator(".block.turn .turn-state")).to_have_text("end turn")
    await expect(page.locator(".block.notice.notice-error")).to_contain_text("bye")
    await expect(page.locator("#composer")).to_be_hidden()
    await expect(page.locator("#rename-button")).to_be_disabled()
    await expect(page.locator("#session-status")).to_have_text("archived")
    await expect(page.locator("#presence .chip")).to_have_count(0)  # nobody is attached
    await page.click("#tab-events")
    await expect(page.locator("#events .event-row").last.locator(".ev-type")).to_have_text(
        "session.deleted"
    )
    await page.click("#tab-timeline")
    assert sockets == []  # never attached: attaching an archived session is refused (4410)
    await shoot(page, "archived-read-only")
    await clean(page)
    await live.close()


XSS = (
    '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'
    '<svg onload="window.__xss=3"></svg><a href="javascript:window.__xss=4">link</a>'
    '[md link](javascript:window.__xss=5) <iframe srcdoc="<script>parent.__xss=6</script>">'
    '</iframe><style>body{display:none}</style><div style="x" onclick="window.__xss=7">d</div>'
)


async def test_no_frame_content_ever_executes(
    browser: Any, make_master: Callable[..., Any], shoot: Shoot
) -> None:
    """Script and event-handler payloads in every user-controlled field: nothing executes."""
    master: Master = await make_master(reattach_window_s=60.0)
    # steers: the other edge's user.message during the open turn is relayed at once (§17.3)
    client = await Peer.open(
        master.ws_url,
        "s-xss",
        token=API_KEY,
        create={"name": f"name {XSS}"},
        accepts_input_during_turn=True,
    )
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("agent.thinking.delta", {"block_id": "h", "delta": f"thinking {XSS}"})
    await client.send("agent.thinking.done", {"block_id": "h"})
    await client.send("agent.text.delta", {"block_id": "t", "delta": f"text {XSS}"})
    await client.send("agent.text.done", {"block_id": "t"})
    await client.send(
        "tool.invoke.request",
        {"call_id": "c", "tool_name": f"tool {XSS}"[:256], "input": {XSS: XSS, "list": [XSS]}},
    )
    await client.send("tool.invoke.result", {"call_id": "c", "status": "error", "output": XSS})
    await client.send(
        "tool.invoke.request", {"call_id": "d", "tool_name": "json", "input": {"q": XSS}}
    )
    await client.send(
        "tool.invoke.result", {"call_id": "d", "status": "ok", "output": {XSS: [XSS]}}
    )
    await client.send(
        "agent.interaction.request",
        {
            "interaction_id": "i1",
            "kind": "choice",
            "prompt": f"prompt {XSS}",
            "options": [XSS, {"label": f"label {XSS}", "value": XSS}],
        },
    )
    await client.send(
        "session.compacted",
        {
            "summary": f"summary {XSS}",
            "previous_token_count": 2,
            "current_token_count": 1,
            "trigger": "manual",
            "preserved_elements": {"files_modified": [XSS]},
        },
    )
    await client.send(
        "session.error", {"error_code": "tool_failed", "message": f"error {XSS}", "fatal": False}
    )
    other = await Peer.open(master.ws_url, "s-xss", role="edge", token=API_KEY)
    await other.send("user.message", {"text": f"user {XSS}"})
    page = await open_dashboard(browser, master, "s-xss")
    await expect(page.locator(".block.compaction")).to_have_count(1)
    await expect(page.locator(".block.user_message")).to_have_count(1)
    # Raw HTML in Markdown is shown as the text it is.
    await expect(page.locator(".block.text .md")).to_contain_text('text <img src=x onerror="')
    await expect(page.locator(".block.user_message .md")).to_contain_text(
        "<script>window.__xss=2</script>"
    )
    await expect(page.locator(".block.notice.notice-error")).to_contain_text("error <img src=x")
    await expect(page.locator(".block.interaction .ask-prompt")).to_have_text(f"prompt {XSS}")
    await expect(page.locator(".block.interaction button")).to_have_count(2)
    await expect(page.locator("#session-name")).to_have_text(f"name {XSS}")
    await expect(page.locator(".block.tool_call .tool-name").first).to_have_text(
        f"tool {XSS}"[:256]
    )
    # Open everything that folds, click every link and button a payload could hide behind.
    for summary in await page.locator("#transcript summary").all():
        if await summary.is_visible():
            await summary.click()
    await page.locator(".block.text .md a").first.click(modifiers=["Alt"])
    await page.click("#tab-events")
    for summary in await page.locator("#events summary").all():
        if await summary.is_visible():
            await summary.click()
    await page.click("#tab-timeline")
    await page.locator(".block.interaction button").last.click()
    answer = await client.recv_type("control.interaction.response")
    assert answer["payload"]["response"] == XSS  # the value, sent as data
    await page.wait_for_timeout(200)  # let anything that might run, run (no assertion on time)
    assert await page.evaluate("window.__xss") is None
    handlers = await page.evaluate(
        """() => [...document.querySelectorAll("*")].flatMap((e) =>
             [...e.attributes].filter((a) => a.name.startsWith("on")
               || /javascript:/i.test(a.value) || a.name === "srcdoc" || a.name === "style")
             .map((a) => e.tagName + " " + a.name))"""
    )
    assert handlers == []
    tags = await page.evaluate(
        "[...document.querySelectorAll('#app script, #app iframe, #app style, #app svg, #app img')]"
        ".map((e) => e.tagName)"
    )
    assert tags == []
    await clean(page)  # and the CSP never had to block anything
    await shoot(page, "xss-inert")
    await other.close()
    await client.close()
