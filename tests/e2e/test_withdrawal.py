"""Withdrawing a question (notes §16.4) through a real master, its views and its HTTP API."""

from __future__ import annotations

import aiohttp
import pytest

from protocol import frames as F
from protocol.client import FrameRefused, RawpClient
from protocol.view import InteractionBlock
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.support.clients import FAST, wait_until


async def _status(master: Master, session_id: str) -> str:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{master.http_url}/v1/sessions/{session_id}", headers=headers) as response,
    ):
        body = await response.json()
        return str(body["status"])


def _ask(view_blocks: list[object], interaction_id: str) -> InteractionBlock:
    for block in view_blocks:
        if isinstance(block, InteractionBlock) and block.interaction_id == interaction_id:
            return block
    raise AssertionError(f"no interaction {interaction_id} in the view")


async def test_a_withdrawn_question_leaves_requires_action_and_refuses_a_late_answer(
    master: Master,
) -> None:
    """After agent.interaction.cancel the session is no longer requires_action, the edge's
    view shows the question withdrawn, and a later response is refused interaction_state."""
    sid = "s-withdraw"
    agent = RawpClient(master.ws_url, sid, role="client", token=API_KEY, create=True, backoff=FAST)
    edge = RawpClient(master.ws_url, sid, role="edge", token=API_KEY, backoff=FAST)
    async with agent, edge:
        turn = await agent.turn_start()
        ask = await agent.interaction_request("i1", "confirmation", "Deploy?")
        await agent.committed(ask)
        assert await _status(master, sid) == "requires_action"
        withdrawal = await agent.interaction_cancel("i1", "no answer within 30 s")
        await agent.committed(withdrawal)
        assert await _status(master, sid) == "running"
        await wait_until(
            lambda: any(
                isinstance(b, InteractionBlock) and b.status == "withdrawn"
                for b in edge.view.blocks
            ),
            what="the edge's view saw the withdrawal",
        )
        block = _ask(edge.view.blocks, "i1")
        assert block.withdraw_reason == "no answer within 30 s"
        with pytest.raises(FrameRefused) as refused:
            await edge.send(
                F.InteractionResponse(
                    payload=F.InteractionResponsePayload(interaction_id="i1", response=True),
                    **edge._envelope(),
                )
            )
        assert refused.value.code == "interaction_state"
        # withdrawing twice, or a question never asked, is refused the same way
        with pytest.raises(FrameRefused) as again:
            await agent.send(
                F.InteractionCancel(
                    payload=F.InteractionCancelPayload(interaction_id="i1"), **agent._envelope()
                )
            )
        assert again.value.code == "interaction_state"
        await agent.turn_end(turn.payload.turn_id)
        await agent.usage(input_tokens=1, output_tokens=1)
        await agent.flush(timeout=10)


async def test_only_one_of_two_questions_withdrawn_keeps_requires_action(master: Master) -> None:
    """The session leaves requires_action only when nothing else is pending (notes §16.4)."""
    sid = "s-withdraw-two"
    async with RawpClient(
        master.ws_url, sid, role="client", token=API_KEY, create=True, backoff=FAST
    ) as agent:
        await agent.turn_start()
        await agent.interaction_request("a", "input", "Name?")
        await agent.interaction_request("b", "input", "Colour?")
        await agent.committed(await agent.interaction_cancel("a"))
        assert await _status(master, sid) == "requires_action"
        await agent.committed(await agent.interaction_cancel("b"))
        assert await _status(master, sid) == "running"
