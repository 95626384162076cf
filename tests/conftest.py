"""Fixtures shared by test modules."""

from __future__ import annotations

import os
import shutil

import pytest
from playwright.sync_api import sync_playwright


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium, driven by Playwright (whose own browser download is unused)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        # Skipped where no browser is installed, unless told it must be there (.ci/run).
        need = "the browser tests need Debian's chromium (apt-get install chromium)"
        if os.environ.get("FDO_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{need}; FDO_REQUIRE_BROWSER=1 says it must be installed")
        pytest.skip(f"{need}; none on PATH")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True)
        yield browser
        browser.close()
