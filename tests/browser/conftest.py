"""The browser tier: every test here drives Debian's chromium through Playwright."""

import os

import pytest

from tests.support.site import CHROMIUM


@pytest.fixture(scope="module")
def browser():
    if not os.access(CHROMIUM, os.X_OK):
        if os.environ.get("VLABENCH_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{CHROMIUM} is missing and VLABENCH_REQUIRE_BROWSER=1 (apt-get install chromium)")
        pytest.skip(f"browser tests need Debian's chromium at {CHROMIUM} (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield chromium
        chromium.close()
