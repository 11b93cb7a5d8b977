"""ACP ⇄ RAWP sans I/O: the choices the bridge and the attach make on hostile input."""

from __future__ import annotations

from acp import text_block, update_agent_message_text
from acp.schema import AgentMessageChunk, PermissionOption, PromptResponse

from protocol import codec
from protocol.acp import MAX_DELTA_CHARS, AcpEgress, AcpIngest, answer_outcome
from protocol.frames import InteractionRequest, InteractionRequestPayload

OPTIONS = [
    PermissionOption(option_id="ok", name="Allow", kind="allow_once"),
    PermissionOption(option_id="always", name="Always", kind="allow_always"),
    PermissionOption(option_id="no", name="Reject", kind="reject_once"),
]


def test_answers_select_options_and_never_allow_by_accident() -> None:
    """An option id, a {value: id}, true/false pick; anything else picks a reject option."""
    assert answer_outcome(OPTIONS, "always") == ("always", True)
    assert answer_outcome(OPTIONS, {"value": "ok"}) == ("ok", True)
    assert answer_outcome(OPTIONS, {"optionId": "no"}) == ("no", True)
    assert answer_outcome(OPTIONS, True) == ("ok", True)
    assert answer_outcome(OPTIONS, False) == ("no", True)
    for hostile in ("OK", "ok\n", ["ok"], None, 1, {"value": ["ok"]}):
        assert answer_outcome(OPTIONS, hostile) == ("no", False)
    allow_only = OPTIONS[:2]
    assert answer_outcome(allow_only, "nonsense") == (None, False)  # cancelled, not allowed


def test_a_huge_chunk_becomes_deltas_that_fit_a_frame() -> None:
    """A chunk past MAX_DELTA_CHARS is cut into several deltas of one block."""
    ingest = AcpIngest()
    ingest.begin()
    ops = ingest.update(update_agent_message_text("é" * (MAX_DELTA_CHARS * 2 + 5)))
    deltas = [op.args for op in ops if op.kind == "text_delta"]
    assert [len(d["delta"]) for d in deltas] == [MAX_DELTA_CHARS, MAX_DELTA_CHARS, 5]
    assert len({d["block_id"] for d in deltas}) == 1


def test_unusable_or_reused_message_ids_get_fresh_block_ids() -> None:
    """A messageId with control characters, or one a closed block used, is replaced."""
    ingest = AcpIngest(taken_ids={"m-old"})
    ingest.begin()
    for message_id in ("bad\nid", "m-old", "x" * 300):
        chunk = AgentMessageChunk(
            session_update="agent_message_chunk", content=text_block("hi"), message_id=message_id
        )
        (*_, delta) = ingest.update(chunk)
        assert delta.args["block_id"] != message_id
        assert delta.args["block_id"].startswith("acp-")
    end = ingest.end(PromptResponse(stop_reason="end_turn"))
    assert [op.kind for op in end] == ["text_done", "turn_end", "usage"]


def test_a_turn_never_ends_with_a_tool_call_open() -> None:
    """The prompt's answer resolves every call still open (cancelled) before the turn ends."""
    from acp import start_tool_call

    ingest = AcpIngest()
    ingest.begin()
    ingest.update(start_tool_call("c1", "Run", status="in_progress"))
    ops = ingest.end(PromptResponse(stop_reason="max_turn_requests"))
    assert [op.kind for op in ops] == ["tool_result", "ignorable", "turn_end", "usage"]
    assert ops[0].args["status"] == "cancelled"
    assert ops[2].args["stop_reason"] == "max_tokens"


def _ask(kind: str, options: list[object] | None) -> InteractionRequest:
    payload = InteractionRequestPayload(
        interaction_id="i1", kind=kind, prompt="Go?", options=options
    )  # type: ignore[arg-type]
    return InteractionRequest(
        payload=payload, message_id="m1", session_id="s", timestamp=codec.now(), seq=3
    )


def test_egress_asks_confirmations_and_plain_choices() -> None:
    """A confirmation is Yes/No (true/false); plain options get ids and keep their values."""
    egress = AcpEgress()
    (out,) = egress.frame(_ask("confirmation", None))
    assert out.ask is not None
    assert [(o.option_id, o.kind) for o in out.ask.options] == [
        ("yes", "allow_once"),
        ("no", "reject_once"),
    ]
    assert out.ask.values == {"yes": True, "no": False}
    egress = AcpEgress()
    (out,) = egress.frame(_ask("choice", ["red", {"pick": 2}, "red"]))
    assert out.ask is not None
    assert out.ask.values == {"red": "red", "option-1": {"pick": 2}, "option-2": "red"}
    assert egress.frame(_ask("input", None)) == []  # no free-text question in ACP
