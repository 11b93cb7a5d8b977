"""Browser tests of the dashboard (headless Chromium via Playwright)."""
