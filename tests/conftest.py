"""Fixtures shared by test modules, in every directory of tests/ (their helpers: tests/support/)."""

from __future__ import annotations

import os
import shutil

import pytest
from playwright.sync_api import sync_playwright

from execution.measure import TIME_SCALE_VARIABLE

# The helpers of tests/support/ assert as the tests do: pytest explains their failures too.
pytest.register_assert_rewrite("tests.support")

# Every measurement of the suite, in this process and the workers and commands it starts, takes
# a quarter of its time budget: the tests' programs and effects are small or large, never subtle.
os.environ.setdefault(TIME_SCALE_VARIABLE, "0.25")
# No compile of the suite's hooked jobs goes to a holdout arm unless its test asks for one
# (fdo run --holdout): which keys a job id holds out hangs on the machine's environment key.
os.environ.setdefault("FDO_HOLDOUT", "0")


@pytest.fixture(scope="module", autouse=True)
def measure_scale(request):
    """A test file whose assertions hang on what its stages leave behind, not on what a
    measurement finds, or whose effects are several-fold, marks itself
    `pytestmark = pytest.mark.measure_scale(S)`: its measurements, in this process and the ones
    its tests start, take S of their time budget instead of the suite's."""
    marker = request.node.get_closest_marker("measure_scale")
    if marker is None:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(TIME_SCALE_VARIABLE, str(marker.args[0]))
        yield


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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first, whichever directory of tests/ holds them, each file's tests in
    their order: `make test` runs two files at a time (xdist's loadfile), and a long file taken
    last would run alone at the end. Length is guessed from the marks: a file of slow tests only,
    then the most slow tests."""
    tests: dict[object, list[bool]] = {}
    for item in items:
        tests.setdefault(item.path, []).append(item.get_closest_marker("slow") is not None)
    items.sort(key=lambda item: (not all(tests[item.path]), -sum(tests[item.path])))  # stable
