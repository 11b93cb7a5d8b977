"""The client library's first hour: replayed frames one by one, status callbacks, fail-fast
connect with a logged first failure, and wss:// with a certificate made in the test."""

from __future__ import annotations

import logging
import socket
import ssl
from pathlib import Path

import pytest
import trustme

from protocol import codec
from protocol import frames as F
from protocol.client import (
    Backoff,
    ConnectionStatus,
    Delivered,
    RawpClient,
    ReconnectExhausted,
)
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.support.clients import FAST, start_master


def _free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _agent_session(master: Master, sid: str) -> None:
    async with RawpClient(
        master.ws_url, sid, role="client", token=API_KEY, create=True, backoff=FAST
    ) as agent:
        turn = await agent.turn_start()
        await agent.text_delta("b1", "Hel")
        await agent.text_delta("b1", "lo")
        await agent.text_done("b1")
        await agent.turn_end(turn.payload.turn_id)
        await agent.usage(input_tokens=1, output_tokens=2)
        await agent.flush(timeout=10)


async def test_a_backlog_is_iterated_frame_by_frame_marked_replayed(master: Master) -> None:
    """frames() opens the backlog's session.history: each delta arrives, marked replayed."""
    sid = "s-ergo-backlog"
    await _agent_session(master, sid)
    edge = RawpClient(master.ws_url, sid, role="edge", token=API_KEY, from_start=True, backoff=FAST)
    async with edge:
        seen: list[Delivered] = []
        async for item in edge.frames():
            seen.append(item)
            if isinstance(item.frame, F.Usage):
                break
    deltas = [d for d in seen if isinstance(d.frame, F.TextDelta)]
    assert [d.frame.payload.delta for d in deltas] == ["Hel", "lo"]  # type: ignore[union-attr]
    assert all(d.replayed and isinstance(d.history, F.History) for d in deltas)
    assert isinstance(seen[0].frame, F.Welcome)
    assert not seen[0].replayed


async def test_a_backlog_can_still_be_taken_whole(master: Master) -> None:
    """unpack_histories=False (and plain iteration) yield the backlog as one History frame."""
    sid = "s-ergo-whole"
    await _agent_session(master, sid)
    edge = RawpClient(master.ws_url, sid, role="edge", token=API_KEY, from_start=True, backoff=FAST)
    async with edge:
        stream = edge.frames(unpack_histories=False)
        first = await anext(stream)
        second = await anext(stream)
        await stream.aclose()
    assert isinstance(first.frame, F.Welcome)
    assert isinstance(second.frame, F.History)
    assert not second.replayed


async def test_status_callbacks_see_every_change(master: Master) -> None:
    """add_status_callback is called on each change; its remover stops the calls."""
    sid = "s-ergo-status"
    seen: list[ConnectionStatus] = []
    later: list[ConnectionStatus] = []
    agent = RawpClient(master.ws_url, sid, role="client", token=API_KEY, create=True)
    agent.add_status_callback(seen.append)
    remove = agent.add_status_callback(later.append)
    await agent.connect()
    remove()
    await agent.close()
    assert seen == [
        ConnectionStatus.CONNECTING,
        ConnectionStatus.CONNECTED,
        ConnectionStatus.CLOSED,
    ]
    assert later == [ConnectionStatus.CONNECTING, ConnectionStatus.CONNECTED]


async def test_connect_fails_fast_and_logs_the_first_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A wrong port: the first failure is a warning, max_attempts ends the retrying."""
    url = f"ws://127.0.0.1:{_free_port()}/v1/ws"
    client = RawpClient(url, "s-nowhere", role="edge", token=API_KEY, backoff=FAST)
    with (
        caplog.at_level(logging.DEBUG, logger="rawp.client"),
        pytest.raises(ReconnectExhausted) as exhausted,
    ):
        await client.connect(max_attempts=3)
    assert "3 attempt(s)" in str(exhausted.value)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert url in warnings[0].getMessage()
    assert client.status is ConnectionStatus.CLOSED
    assert client.last_connect_error is not None


async def test_connect_timeout_ends_retrying() -> None:
    """connect(timeout=...) gives up on an unreachable master with ReconnectExhausted."""
    url = f"ws://127.0.0.1:{_free_port()}/v1/ws"
    client = RawpClient(
        url, "s-nowhere", role="edge", token=API_KEY, backoff=Backoff(initial=0.05, maximum=0.1)
    )
    with pytest.raises(ReconnectExhausted) as exhausted:
        await client.connect(timeout=0.5)
    assert "within 0.5 s" in str(exhausted.value)


async def test_the_client_speaks_wss_with_a_private_ca(tmp_path: Path) -> None:
    """A master with a certificate from a CA made here; the client trusts that CA only."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    master = await start_master(tls_cert=str(cert_file), tls_key=str(key_file))
    try:
        assert master.ws_url.startswith("wss://")
        context = ssl.create_default_context()
        ca.configure_trust(context)
        sid = "s-wss"
        async with (
            RawpClient(
                master.ws_url, sid, role="client", token=API_KEY, create=True, ssl_context=context
            ) as agent,
            RawpClient(master.ws_url, sid, role="edge", token=API_KEY, ssl_context=context) as edge,
        ):
            turn = await agent.turn_start()
            assert await agent.committed(turn) >= 1
            got = await edge.receive(timeout=5)
            while got is not None and not isinstance(got, F.TurnStart):
                got = await edge.receive(timeout=5)
            assert isinstance(got, F.TurnStart)
        # without the CA the handshake fails: the default trust store does not know it
        untrusting = RawpClient(master.ws_url, sid, role="edge", token=API_KEY)
        with pytest.raises(ReconnectExhausted):
            await untrusting.connect(max_attempts=1)
    finally:
        await master.stop()


async def _after_welcome(client: RawpClient) -> F.Frame | F.GenericFrame | None:
    """The next frame received that is not a welcome."""
    while True:
        got = await client.receive(timeout=10)
        if not isinstance(got, F.Welcome):
            return got


async def test_an_edge_declining_presence_sees_the_session_and_no_roster(master: Master) -> None:
    """presence=False: the welcome says so (``view.presence``), other edges come and go
    unannounced, the agent's frames arrive, before and after a reattach; ``rawp tail
    --no-presence`` (``follow(presence=False)``) prints no attaches (docs/protocol.md §5)."""
    from protocol.tail import follow

    sid = "s-ergo-no-presence"
    async with (
        RawpClient(
            master.ws_url, sid, role="client", token=API_KEY, create=True, backoff=FAST
        ) as agent,
        RawpClient(
            master.ws_url, sid, role="edge", token=API_KEY, backoff=FAST, presence=False
        ) as viewer,
    ):
        assert viewer.view.presence is False
        async with RawpClient(master.ws_url, sid, role="edge", token=API_KEY, backoff=FAST):
            pass  # an edge attaches and leaves: two presence frames the viewer declined
        first = await agent.agent_state("thinking")
        got = await _after_welcome(viewer)
        assert got is not None
        assert got.message_id == first.message_id
        session = master.hub.sessions[sid]
        await session.participants[viewer.participant_id or ""].sink.close(1012, "restart")
        second = await agent.agent_state("idle")
        got = await _after_welcome(viewer)
        assert isinstance(got, F.History)  # the backlog: the agent's frame, no presence
        assert [codec.decode(f).message_id for f in got.payload.frames] == [second.message_id]
        assert viewer.view.participants == {}
        printed: list[str] = []
        status = await follow(
            sid,
            ws_url=master.ws_url,
            token=API_KEY,
            from_start=True,
            timeout=1.0,
            write=printed.append,
            presence=False,
        )
        assert status == 0
        text = "".join(printed)
        assert "following session" in text, text
        assert " attached" not in text, text
        assert " detached" not in text, text
