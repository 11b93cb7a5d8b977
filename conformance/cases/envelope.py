"""Envelope rules (rawp-notes §3, §15.2): unknown types and keys, seq and sender stamps.

* an unknown ``type`` is refused with ``unknown_type`` unless ``metadata.ignorable`` is true,
  in which case it is relayed untouched;
* unknown envelope, metadata and payload keys are relayed untouched;
* the master stamps ``seq`` (dense, per session) and ``sender`` on every frame it delivers,
  ignoring whatever the participant put there.
"""

from __future__ import annotations

from typing import Any

from ..case import case, expect
from ..peer import describe
from ..runner import Context

__all__: list[str] = []

_PROBE = "x_conformance.probe"  # a frame type is [a-z0-9_] words (notes §16.7)


@case(
    id="notes-3/unknown-type-rejected",
    level="MUST",
    description="an unknown type without metadata.ignorable gets unknown_type and is not relayed",
    kill="relay unknown types even without metadata.ignorable",
)
async def unknown_type_rejected(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    probe = await client.send(_PROBE, {"n": 1})
    (before,) = await ctx.barrier(client, [edge])
    leaked = [f for f in before if f.get("message_id") == probe["message_id"]]
    expect(not leaked, "the unknown type was relayed to the edge")
    await ctx.expect_error(client, "unknown_type", about="unknown type without ignorable")


@case(
    id="notes-3/unknown-type-ignorable-relayed",
    level="MUST",
    description="an unknown type with metadata.ignorable: true is relayed untouched",
    kill="refuse unknown types even when metadata.ignorable is true",
)
async def unknown_type_ignorable(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    probe = await client.send(
        _PROBE, {"n": 1, "nested": {"k": [1, 2]}}, metadata={"ignorable": True, "trace": "t-1"}
    )
    (before,) = await ctx.barrier(client, [edge])
    got = [f for f in before if f.get("message_id") == probe["message_id"]]
    expect(got, "the ignorable unknown type did not reach the edge before a later frame")
    frame = got[0]
    expect(frame.get("type") == _PROBE, f"relayed with type {frame.get('type')!r}")
    expect(frame.get("payload") == probe["payload"], f"payload changed: {frame.get('payload')!r}")
    expect(
        frame.get("metadata") == probe["metadata"], f"metadata changed: {frame.get('metadata')!r}"
    )


@case(
    id="notes-3/unknown-keys-relayed",
    level="MUST",
    description="unknown envelope, metadata and payload keys are relayed untouched",
    kill="re-encode relayed frames from the parsed frame, dropping unknown keys",
)
async def unknown_keys(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    sent = await client.send(
        "agent.state",
        {"state": "thinking", "x_detail": {"why": ["a", 1]}},
        x_conformance={"k": 1},
        metadata={"trace": "abc"},
    )
    frame = await edge.recv_until(
        lambda f: f.get("message_id") == sent["message_id"], what="the agent.state frame"
    )
    got = frame[-1]
    expect(got.get("x_conformance") == {"k": 1}, "the unknown envelope key was not relayed")
    expect(
        got.get("payload", {}).get("x_detail") == {"why": ["a", 1]},
        "the unknown payload key was not relayed",
    )
    expect(
        isinstance(got.get("metadata"), dict) and got["metadata"].get("trace") == "abc",
        "the unknown metadata key was not relayed",
    )


@case(
    id="notes-3/seq-and-sender-stamped",
    level="MUST",
    description="delivered frames carry dense seqs and the master's sender stamp, not a forged one",
    kill="keep a sender stamp the participant put on its frame",
)
async def seq_and_sender(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    forged: dict[str, Any] = {"role": "master", "participant_id": "forged"}
    sent = [
        await client.send("agent.state", {"state": "thinking"}),
        await client.send("agent.state", {"state": "responding"}, seq=999999, sender=forged),
        await client.send("agent.state", {"state": "idle"}),
    ]
    got = [(await edge.recv_id(f["message_id"], what="agent.state")).frame for f in sent]
    seqs = [f.get("seq") for f in got]
    expect(all(isinstance(s, int) and s >= 1 for s in seqs), f"seqs are not positive: {seqs}")
    first = seqs[0]
    assert isinstance(first, int)
    expect(seqs == [first, first + 1, first + 2], f"seqs are not dense: {seqs}")
    for frame in got:
        sender = frame.get("sender")
        expect(
            isinstance(sender, dict)
            and sender.get("role") == "client"
            and sender.get("participant_id") == client.participant_id,
            f"{describe(frame)} carries sender {sender!r}, not the client's stamp",
        )
