"""The checked-in dashboard bundle is what its sources build to (``make dashboard``)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "sdk" / "dashboard"
STATIC = ROOT / "relay" / "http" / "static"


def test_page_loads_only_the_bundle() -> None:
    """index.html loads the bundle and its stylesheet, nothing inline, no other script."""
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    assert html.count("<script") == 1
    assert '<script type="module" src="/static/dashboard.js"></script>' in html
    assert "<style" not in html
    assert " style=" not in html
    assert re.search(r"\son[a-z]+\s*=", html, re.IGNORECASE) is None  # no inline handlers
    assert sorted(p.name for p in STATIC.iterdir()) == [
        "dashboard-style.css",
        "dashboard.js",
        "index.html",
    ]


def test_bundle_is_not_stale() -> None:
    """A fresh esbuild build of sdk/dashboard equals the checked-in bundle, byte for byte."""
    node = shutil.which("node")
    if node is None or not (DASHBOARD / "node_modules" / "esbuild").is_dir():
        pytest.skip("needs node and `npm ci` in sdk/dashboard (make dashboard-check runs both)")
    run = subprocess.run(
        [node, "build.mjs", "--check"],
        cwd=DASHBOARD,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr + run.stdout
