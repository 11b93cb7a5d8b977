"""docs/operations.md's exit-code table is the one the code makes: a new exit status, or a
changed cause, without the document fails here."""

from __future__ import annotations

from pathlib import Path

from protocol.docgen import render_docs
from relay.docgen import DOC_SECTIONS
from relay.startup import EXIT_CAUSES, ExitCode

REPO = Path(__file__).resolve().parents[2]


def test_the_exit_code_table_is_current() -> None:
    """The generated section equals what relay/startup.py makes now (``make schemas``)."""
    for path, text in render_docs(REPO, DOC_SECTIONS).items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name} is stale: make schemas"


def test_every_exit_code_is_explained() -> None:
    """Each ExitCode has a cause and an example, and the document shows its row."""
    assert set(EXIT_CAUSES) == set(ExitCode)
    text = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    for code, (cause, _example) in EXIT_CAUSES.items():
        assert f"| {code.value} | {cause} |" in text
