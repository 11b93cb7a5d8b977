"""The dashboard shows only the controls its credential's scopes allow (notes §17.6)."""

from __future__ import annotations

from typing import Any

from relay.server import Master
from tests.browser.test_dashboard import Shoot, agent, clean, expect, open_dashboard


async def test_a_read_only_key_sees_no_write_controls(
    browser: Any, master: Master, shoot: Shoot
) -> None:
    """Signed in with a read-only key: no composer, rename, delete, cancel or answer buttons;
    the transcript and the question are still shown."""
    client = await agent(master, "s-ro", "Read-only view")
    secret, _ = await master.hub.auth.create_key("default", ["read"])
    page = await open_dashboard(browser, master, "s-ro", token=secret)
    await client.send("session.turn.start", {"turn_id": "t-ro-1", "turn_index": 0})
    await client.send(
        "agent.interaction.request",
        {"interaction_id": "i-ro", "kind": "confirmation", "prompt": "Proceed?"},
    )
    question = page.locator(".block.interaction")
    await expect(question).to_contain_text("Proceed?")
    await expect(question).to_contain_text("may only read")
    await expect(question.locator("button")).to_have_count(0)
    await expect(page.locator("#identity")).to_contain_text("read-only")
    for control in ("#composer", "#rename-button", "#delete-button", "#cancel-button"):
        await expect(page.locator(control)).to_be_hidden()
    await shoot(page, "read-only-key")
    await clean(page)


async def test_a_full_key_sees_the_write_controls(browser: Any, master: Master) -> None:
    """The same page with a key carrying write and delete shows composer, rename and delete."""
    await agent(master, "s-rw", "Full view")
    secret, _ = await master.hub.auth.create_key("default", ["read", "write", "delete"])
    page = await open_dashboard(browser, master, "s-rw", token=secret)
    for control in ("#composer", "#rename-button", "#delete-button"):
        await expect(page.locator(control)).to_be_visible()
    await clean(page)
