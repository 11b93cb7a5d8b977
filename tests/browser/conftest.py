"""Headless Chromium for the dashboard tests, and where their screenshots go.

The browser is Debian's ``chromium`` (``/usr/bin/chromium``), driven by Playwright's Python
API — no browser download. Without a chromium binary every browser test is SKIPPED, and the
run says so loudly at the end. Each test gets a fresh profile (``--user-data-dir``) in its
tmp dir; screenshots are saved there, and with ``RAWP_UPDATE_SCREENSHOTS=1`` (``make
screenshots``) also copied to ``tests/browser/screenshots/`` (committed: one small PNG per view
of the dashboard, so a person can look at them). A plain test run leaves the tracked ones
alone; the other PNGs written there (the conformance report's) are gitignored by name.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import make_master, master

__all__ = ["browser", "chromium_path", "make_master", "master", "shoot"]

SCREENSHOTS = Path(__file__).parent / "screenshots"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
_MISSING = (
    "NO CHROMIUM BINARY: the dashboard's browser tests were SKIPPED. Install Debian's "
    "chromium (apt-get install -y chromium) to run them."
)
_skipped: list[str] = []


def find_chromium() -> str | None:
    """Debian's chromium, else any chromium on PATH."""
    if Path("/usr/bin/chromium").exists():
        return "/usr/bin/chromium"
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """The chromium binary; skips (loudly) without one."""
    path = find_chromium()
    if path is None:
        _skipped.append(_MISSING)
        warnings.warn(_MISSING, stacklevel=1)
        pytest.skip(_MISSING)
    return path


@pytest.fixture
async def browser(chromium_path: str, tmp_path: Path) -> AsyncIterator[Any]:
    """A fresh headless Chromium context (its own profile dir); closed after the test."""
    from playwright.async_api import async_playwright, expect

    expect.set_options(timeout=10_000)
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=chromium_path,
            headless=True,
            args=ARGS,
            viewport={"width": 1280, "height": 820},
        )
        context.set_default_timeout(10_000)
        try:
            yield context
        finally:
            await context.close()


@pytest.fixture
def shoot(tmp_path: Path) -> Callable[[Any, str], Awaitable[Path]]:
    """``await shoot(page, "name")``: a full-page screenshot in tmp (and in screenshots/
    with ``RAWP_UPDATE_SCREENSHOTS``)."""

    async def take(page: Any, name: str) -> Path:
        path = tmp_path / f"{name}.png"
        await page.screenshot(path=str(path), full_page=True)
        if os.environ.get("RAWP_UPDATE_SCREENSHOTS"):  # a plain run leaves the tracked PNGs
            SCREENSHOTS.mkdir(exist_ok=True)
            shutil.copy(path, SCREENSHOTS / path.name)
        return path

    return take


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Repeat the missing-chromium warning where nobody can miss it."""
    if _skipped:
        terminalreporter.write_sep("!", _MISSING, red=True, bold=True)
