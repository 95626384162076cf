"""Fixtures shared by test modules."""

from __future__ import annotations

import shutil

import pytest
from playwright.sync_api import sync_playwright


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium, driven by Playwright (whose own browser download is unused)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("the browser tests need Debian's chromium (apt-get install chromium; .ci/run installs it)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True)
        yield browser
        browser.close()
