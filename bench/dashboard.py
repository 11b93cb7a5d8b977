"""The dashboard in headless Chromium: a 10,000-frame session opening, and a live stream.

A ``rawp serve`` (memory store) and Debian's ``chromium`` through Playwright (the browser
tests' flags; skipped with the reason when either is missing):

* **open**: a session whose log holds 10,000 frames (whole turns: text deltas, tool calls,
  usage) is opened at ``/#/s/<id>``; measured from ``page.goto`` until the page is attached
  live with the last turn rendered (``open_ms``), then until a click on the Events tab has
  rendered its rows (``interactive_ms``: the page answers input). Best of the rounds.
* **stream**: an agent sends text deltas at 1,000 per second (new block every 200) while the
  page watches; every 100 ms the page's folded ``lastSeq`` and its rendered text are compared
  with what was sent. ``kept_up``: after the last send the page has every delta in its view
  and on screen within 500 ms (``catch_up_ms``); ``max_lag_frames`` is the largest gap seen.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Final

from ._procs import API_KEY, UNTHROTTLED, start_master
from ._report import environment, figure, figures_table, markdown_footer, now_iso, table

__all__ = ["DESCRIPTION", "NAME", "markdown", "run"]

NAME: Final = "dashboard"
DESCRIPTION: Final = "dashboard in headless Chromium: 10,000-frame session open, 1,000 deltas/s"
FRAMES: Final = 10_000
RATE: Final = 1000
AIM_OPEN_MS: Final = 1000.0
AIM_CATCH_UP_MS: Final = 500.0
ARGS: Final = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _chromium() -> str | None:
    if Path("/usr/bin/chromium").exists():
        return "/usr/bin/chromium"
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _frame(sid: str, type_: str, payload: dict[str, Any]) -> str:
    now = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
    return json.dumps(
        {
            "type": type_,
            "message_id": str(uuid.uuid4()),
            "session_id": sid,
            "timestamp": now,
            "payload": payload,
        }
    )


async def _agent(ws_url: str, sid: str) -> Any:
    from websockets.asyncio.client import connect

    ws = await connect(ws_url, subprotocols=["rawp.1"])  # type: ignore[list-item]
    hello = {"protocol_version": "1.0.2", "role": "client", "token": API_KEY}
    hello["create"] = {"name": f"bench {sid}"}  # type: ignore[assignment]
    await ws.send(_frame(sid, "connection.hello", hello))
    welcome = json.loads(await ws.recv())
    assert welcome["type"] == "connection.welcome", welcome

    async def drain() -> None:
        async for _ in ws:
            pass

    ws.drain_task = asyncio.ensure_future(drain())  # type: ignore[attr-defined]
    return ws


def _turn(sid: str, index: int) -> list[str]:
    """One whole turn: 14 frames."""
    turn = str(uuid.uuid4())
    frames = [_frame(sid, "session.turn.start", {"turn_id": turn, "turn_index": index})]
    for word in ("Reading ", "the **module** ", "and ", "its ", "tests; ", "then `fix`", "."):
        frames.append(_frame(sid, "agent.text.delta", {"block_id": f"b{index}", "delta": word}))
    frames.append(_frame(sid, "agent.text.done", {"block_id": f"b{index}"}))
    call = f"c{index}"
    frames.append(
        _frame(sid, "tool.invoke.request", {"call_id": call, "tool_name": "grep", "input": {}})
    )
    frames.append(
        _frame(sid, "tool.invoke.result", {"call_id": call, "status": "ok", "output": "x"})
    )
    frames.append(_frame(sid, "session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"}))
    usage = {
        "turn_id": turn,
        "token_usage": {"input_tokens": 100 + index, "output_tokens": 20},
        "cost_usage": {"limit": -1, "used": 0.001 * (index + 1), "unit": "USD"},
        "message_usage": {"limit": -1, "used": index + 1, "unit": "COUNT"},
        "time_to_reset": "PT5H",
    }
    frames.append(_frame(sid, "session.usage", usage))
    return frames


async def _head(page: Any, sid: str) -> int:
    got = await page.evaluate(
        """async (sid) => (await (await fetch('/v1/sessions/' + sid,
             {headers: {Authorization: 'Bearer ' + sessionStorage.getItem('rawp.token')}}))
           .json()).head_seq""",
        sid,
    )
    return int(got)


async def _open(context: Any, http_url: str, sid: str, turns: int) -> dict[str, float]:
    page = await context.new_page()
    started = time.perf_counter()
    await page.goto(f"{http_url}/?token={API_KEY}#/s/{sid}")
    await page.wait_for_selector("#conn-status[data-state='live']", timeout=60_000)
    await page.wait_for_function(
        "(n) => [...document.querySelectorAll('.block.turn .turn-title')]"
        ".some((e) => e.textContent === 'Turn ' + n)",
        arg=turns,
        timeout=60_000,
    )
    opened = time.perf_counter()
    await page.click("#tab-events")
    await page.wait_for_selector("#events .event-row", timeout=60_000)
    interactive = time.perf_counter()
    frames = await page.evaluate("window.rawp.current.frames.length")
    await page.close()
    return {
        "open_ms": (opened - started) * 1000,
        "interactive_ms": (interactive - started) * 1000,
        "frames_loaded": frames,
    }


async def _stream(context: Any, http_url: str, ws_url: str, seconds: float) -> dict[str, Any]:
    sid = f"s-stream-{time.monotonic_ns()}"
    agent = await _agent(ws_url, sid)
    page = await context.new_page()
    await page.goto(f"{http_url}/?token={API_KEY}#/s/{sid}")
    await page.wait_for_selector("#conn-status[data-state='live']", timeout=60_000)
    await agent.send(
        _frame(sid, "session.turn.start", {"turn_id": str(uuid.uuid4()), "turn_index": 0})
    )
    total = int(RATE * seconds)
    sent_chars = 0
    lags: list[int] = []
    sent = 0
    start = time.perf_counter()
    next_sample = start
    while sent < total:
        due = min(total, int((time.perf_counter() - start) * RATE) + 1)
        while sent < due:
            block = f"b{sent // 200}"
            await agent.send(_frame(sid, "agent.text.delta", {"block_id": block, "delta": "word "}))
            sent += 1
            sent_chars += 5
        now = time.perf_counter()
        if now >= next_sample:
            next_sample = now + 0.1
            shown = await page.evaluate(
                "[...document.querySelectorAll('.block.text .md')]"
                ".reduce((n, e) => n + e.textContent.length, 0)"
            )
            lags.append(max(0, sent - shown // 5))
        await asyncio.sleep(0.002)
    finished = time.perf_counter()
    want = sent_chars
    await page.wait_for_function(
        "(want) => window.rawp.view.blocks.filter((b) => b.kind === 'text')"
        ".reduce((n, b) => n + b.text.length, 0) >= want",
        arg=want,
        timeout=60_000,
    )
    await page.wait_for_function(
        "(want) => [...document.querySelectorAll('.block.text .md')]"
        ".reduce((n, e) => n + e.textContent.trim().length + 1, 0) >= want",
        arg=want,
        timeout=60_000,
    )
    caught_up = time.perf_counter()
    errors = await page.evaluate("window.rawp.current.clientErrors.length")
    await page.close()
    agent.drain_task.cancel()
    await agent.close()
    catch_up_ms = (caught_up - finished) * 1000
    return {
        "deltas": sent,
        "seconds": round(finished - start, 3),
        "rate": round(sent / (finished - start)),
        "catch_up_ms": catch_up_ms,
        "max_lag_frames": max(lags) if lags else 0,
        "kept_up": catch_up_ms <= AIM_CATCH_UP_MS and errors == 0,
        "errors": errors,
    }


async def _measure(args: argparse.Namespace, chromium: str) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    rounds = 2 if args.quick else 3
    server = await start_master((*UNTHROTTLED, "--store", "memory"), rawp_serve=True)
    try:
        sid = f"s-big-{time.monotonic_ns()}"
        agent = await _agent(server.ws_url, sid)
        turns = 0
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=chromium, headless=True, args=ARGS)
            context = await browser.new_context(viewport={"width": 1280, "height": 820})
            probe = await context.new_page()
            await probe.goto(f"{server.http_url}/?token={API_KEY}")
            head = 0
            for _ in range(200):  # whole turns until the log holds FRAMES frames
                if head >= FRAMES:
                    break
                for _ in range(max(1, (FRAMES - head) // 14 // 2)):
                    for text in _turn(sid, turns):
                        await agent.send(text)
                    turns += 1
                for _ in range(50):
                    await asyncio.sleep(0.1)
                    now = await _head(probe, sid)
                    if now == head:
                        break
                    head = now
            await probe.close()
            opens = [await _open(context, server.http_url, sid, turns) for _ in range(rounds)]
            stream = await _stream(
                context, server.http_url, server.ws_url, 3.0 if args.quick else 5.0
            )
            await browser.close()
        agent.drain_task.cancel()
        await agent.close()
    finally:
        await server.stop()
    best = min(opens, key=lambda r: r["interactive_ms"])
    return {"frames": head, "turns": turns, "opens": opens, "best": best, "stream": stream}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Open a 10,000-frame session and watch a 1,000 deltas/s stream (module docstring)."""
    base: dict[str, Any] = {
        "benchmark": NAME,
        "command": "make bench ARGS=" + ('"dashboard --quick"' if args.quick else "dashboard"),
        "environment": environment(),
        "generated_at": now_iso(),
    }
    chromium = _chromium()
    if chromium is None:
        return {**base, "skipped": "no chromium binary", "figures": []}
    try:
        import playwright  # noqa: F401
    except ImportError:
        return {**base, "skipped": "the playwright package is not installed", "figures": []}
    measured = asyncio.run(_measure(args, chromium))
    best, stream = measured["best"], measured["stream"]
    figures = [
        figure(
            f"open a {measured['frames']:,}-frame session until interactive",
            round(best["interactive_ms"]),
            "ms",
            aim=f"≤ {AIM_OPEN_MS:.0f} ms",
            met=best["interactive_ms"] <= AIM_OPEN_MS,
        ),
        figure(
            f"catch up after a {stream['rate']:,} deltas/s stream",
            round(stream["catch_up_ms"]),
            "ms",
            aim=f"≤ {AIM_CATCH_UP_MS:.0f} ms",
            met=stream["kept_up"],
        ),
    ]
    return {**base, **measured, "figures": figures}


def markdown(result: dict[str, Any]) -> str:
    lines = ["# The dashboard in headless Chromium", ""]
    if result.get("skipped"):
        return "\n".join([*lines, f"Skipped: {result['skipped']}.", ""])
    s = result["stream"]
    lines += [
        figures_table(result["figures"]),
        table(
            ["round", "frames loaded", "attached + rendered ms", "interactive ms"],
            [
                [i + 1, r["frames_loaded"], round(r["open_ms"]), round(r["interactive_ms"])]
                for i, r in enumerate(result["opens"])
            ],
        ),
        table(
            ["deltas", "seconds", "rate /s", "max lag (frames)", "catch-up ms", "kept up"],
            [
                [
                    s["deltas"],
                    s["seconds"],
                    s["rate"],
                    s["max_lag_frames"],
                    round(s["catch_up_ms"]),
                    "yes" if s["kept_up"] else "no",
                ]
            ],
        ),
        f"Session of {result['frames']:,} logged frames ({result['turns']} whole turns). "
        "Open: from `page.goto` until attached live with the last turn rendered, then until a "
        "click on the Events tab rendered its rows. Stream: the page's rendered text sampled "
        "every 100 ms against the deltas sent.",
        "",
    ]
    return "\n".join(lines + markdown_footer(result))
