"""The TypeScript SDK's view corpus (sdk/typescript/test/corpus/) matches the Python view."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests import sdk_corpus

REPO = Path(__file__).resolve().parents[2]


def test_sdk_view_corpus_is_up_to_date() -> None:
    """The checked-in fixtures equal a fresh deterministic generation from the Python view.

    Generated in a process of its own, as ``python -m tests.sdk_corpus`` writes them: what
    other tests imported or drew before must not change what is compared.
    """
    checked = subprocess.run(
        [sys.executable, "-m", "tests.sdk_corpus", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_sdk_view_corpus_generation_is_deterministic() -> None:
    """Two generations draw the same cases (ids and timestamps do not leak randomness)."""
    assert sdk_corpus.generate(6) == sdk_corpus.generate(6)
