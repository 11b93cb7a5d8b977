"""The text of the rule a case checks, quoted from the specifications shipped with the runner.

``conformance/spec/rawp-7.md`` is RAWP 1.0.2 §7 (normative); ``conformance/spec/rawp-notes.md``
is this project's wire contract (the notes). :func:`section_text` finds the section a case id
cites — ``7.5.3`` is the ``### 7.5.3`` subsection, ``notes-5`` the notes' ``## 5.`` section,
``notes-15.4`` item 4 of the notes' §15 — so a report shows the rule next to the evidence.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Final

__all__ = ["SPEC_DIR", "section_text"]

SPEC_DIR: Final = Path(__file__).resolve().parent / "spec"


@functools.cache
def _document(name: str) -> list[str]:
    try:
        return (SPEC_DIR / name).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []


def _heading_block(lines: list[str], pattern: re.Pattern[str]) -> str:
    """From the first heading matching ``pattern`` to the next heading of its level or above."""
    for start, line in enumerate(lines):
        if pattern.match(line):
            level = len(line) - len(line.lstrip("#"))
            end = start + 1
            while end < len(lines):
                other = lines[end]
                if other.startswith("#") and len(other) - len(other.lstrip("#")) <= level:
                    break
                end += 1
            return "\n".join(lines[start:end]).strip()
    return ""


def _numbered_item(block: str, item: str) -> str:
    """Item ``item`` (``4.``) of a numbered list inside ``block``, up to the next item."""
    found: list[str] = []
    for line in block.splitlines():
        marker = re.match(r"^(\d+)\. ", line)
        if marker:
            if found:
                break
            if marker.group(1) == item:
                found.append(line)
            continue
        if found:
            found.append(line)
    return "\n".join(found).strip()


def section_text(section: str) -> str:
    """The spec text of ``section`` (``7.5.3``, ``notes-5``, ``notes-15.4``); "" if not found."""
    if section.startswith("notes-"):
        number = section.removeprefix("notes-")
        major, _, item = number.partition(".")
        lines = _document("rawp-notes.md")
        block = _heading_block(lines, re.compile(rf"^## {re.escape(major)}\. "))
        if item:
            return _numbered_item(block, item) or block
        return block
    depth = section.count(".") + 1
    hashes = "#" * depth
    return _heading_block(_document("rawp-7.md"), re.compile(rf"^{hashes} {re.escape(section)} "))
