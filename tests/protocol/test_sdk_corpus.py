"""The TypeScript SDK's view corpus (sdk/typescript/test/corpus/) matches the Python view."""

from __future__ import annotations

from tests import sdk_corpus


def test_sdk_view_corpus_is_up_to_date() -> None:
    """The checked-in fixtures equal a fresh deterministic generation from the Python view."""
    stale = sdk_corpus.stale_files()
    assert not stale, f"stale: {stale}; regenerate with python -m tests.sdk_corpus"


def test_sdk_view_corpus_generation_is_deterministic() -> None:
    """Two generations draw the same cases (ids and timestamps do not leak randomness)."""
    assert sdk_corpus.generate(6) == sdk_corpus.generate(6)
