"""docs/acp.md's mapping tables: every row names the tests that show it, and they exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "acp.md"
TEST_FILES = [
    *sorted((ROOT / "tests" / "interop").glob("test_acp_*.py")),
    ROOT / "tests" / "browser" / "test_acp_dashboard.py",
]


def _rows() -> list[list[str]]:
    """The body rows of the tables under "## The mapping", as cells."""
    text = DOC.read_text()
    section = text[text.index("## The mapping") : text.index("## Not mapped")]
    rows = []
    for line in section.splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if cells[-1] != "Shown by":
            rows.append(cells)
    return rows


def test_every_mapping_row_names_tests_that_exist() -> None:
    """Each row of both tables has a "Shown by" cell of test names, each one defined."""
    defined = {
        name
        for path in TEST_FILES
        for name in re.findall(r"^(?:async )?def (test_\w+)\(", path.read_text(), re.M)
    }
    rows = _rows()
    assert len(rows) >= 40
    for row in rows:
        named = re.findall(r"`(test_\w+)`", row[-1])
        assert named, f"no test named for {row[0]}"
        missing = [n for n in named if n not in defined]
        assert missing == [], f"{row[0]}: {missing}"
