"""The case registry: ids cite sections, every case has a level, a description and a kill."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conformance.case import LEVELS, all_cases, case, spec_reference
from conformance.cases.buffers import simulate

PACKAGE = Path(__file__).resolve().parents[2] / "conformance"


def test_every_case_is_well_formed() -> None:
    """Each case has a section-prefixed id, a level, a one-line description and a kill."""
    cases = all_cases()
    assert len({c.id for c in cases}) == len(cases)
    for c in cases:
        assert c.level in LEVELS
        assert c.spec == spec_reference(c.id)
        assert c.description
        assert "\n" not in c.description
        assert c.kill.strip()


def test_spec_sections_are_covered() -> None:
    """Every §7 subsection with a MUST and the notes' connection and buffer rules have cases."""
    sections = {c.section for c in all_cases()}
    for wanted in ("7.1.1", "7.3.1", "7.5.2", "7.5.3", "7.6.1", "7.7.1", "7.8.1", "7.8.2", "7.8.3"):
        assert wanted in sections
    for wanted in ("notes-2", "notes-3", "notes-5", "notes-6", "notes-7", "notes-15.4"):
        assert wanted in sections


def test_spec_reference_names_the_document() -> None:
    """Ids starting 7.x cite RAWP 1.0.2, ids starting notes-N cite the notes."""
    assert spec_reference("7.5.3/cleanup-order-delete") == "RAWP 1.0.2 §7.5.3"
    assert spec_reference("notes-15.6/takeover") == "rawp-notes §15.6"
    with pytest.raises(ValueError, match="spec section"):
        spec_reference("cleanup-order")


def test_registration_refuses_bad_cases() -> None:
    """A case without a kill, with a bad level or a multi-line description is refused."""
    with pytest.raises(ValueError, match="kill"):
        case(id="7.7.1/x", level="MUST", description="d", kill=" ")
    with pytest.raises(ValueError, match="level"):
        case(id="7.7.1/x", level="MAY", description="d", kill="k")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one line"):
        case(id="7.7.1/x", level="MUST", description="a\nb", kill="k")


def test_policy_model_matches_the_notes() -> None:
    """RING keeps the newest run that fits, DROP the oldest, NONE nothing; counts are exact."""
    sizes = [3, 5, 2, 4]
    ring = simulate("RING", sizes, 7)
    assert (ring.kept, ring.lost, ring.peak) == ([2, 3], 2, 7)
    drop = simulate("DROP", sizes, 9)
    assert (drop.kept, drop.lost, drop.peak) == ([0, 1], 2, 8)
    none = simulate("NONE", sizes, 100)
    assert (none.kept, none.lost, none.peak) == ([], 4, 0)
    oversized = simulate("RING", [3, 50, 2], 10)
    assert (oversized.kept, oversized.lost) == ([2], 2)


def test_runner_imports_nothing_from_the_relay() -> None:
    """The conformance package is black-box: no module imports relay (or the relay's store)."""
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            assert not any(n == "relay" or n.startswith("relay.") for n in names), path


def test_docs_list_every_case() -> None:
    """docs/conformance.md's case table is the registry: ids, levels, rules and kills."""
    text = (PACKAGE.parent / "docs" / "conformance.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and "/" in cells[0]:
            rows[cells[0].strip("`")] = tuple(cells[1:])
    assert rows == {c.id: (c.level, c.description, c.kill) for c in all_cases()}


def test_every_case_has_spec_text() -> None:
    """The report can quote the rule of every case: its section is found in the bundled specs."""
    from conformance.spec_text import section_text

    for c in all_cases():
        text = section_text(c.section)
        number = c.section.removeprefix("notes-")
        assert text, c.id
        assert number.split(".")[-1] in text.splitlines()[0], (c.id, text.splitlines()[0])


def test_features_are_declared_with_known_names() -> None:
    """A case naming an unknown feature is refused at registration."""
    with pytest.raises(ValueError, match="unknown feature"):
        case(id="7.7.1/x", level="MUST", description="d", kill="k", needs=("telepathy",))
