"""What every browser test shares: the Debian ``chromium`` package driven by Playwright
(:func:`browser`), and, when either is missing, a failure with how to install them in CI and as
root (where ``scripts/system-deps.sh`` installs chromium), a skip with that reason elsewhere."""
from __future__ import annotations

import os

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


def playwright_or_reason():
    """The sync Playwright entry point, or fail / skip with how to get a browser."""
    missing = []
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(f"the Debian chromium package ({CHROMIUM})")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
        missing.append("the playwright package (requirements-dev.txt)")
    if not missing:
        return sync_playwright
    message = ("browser tests need " + " and ".join(missing)
               + ": run `bash scripts/system-deps.sh` as root (apt-get install chromium) and `make setup`")
    if os.environ.get("CI") or os.geteuid() == 0:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def browser():
    """A headless chromium, closed after the test."""
    sync_playwright = playwright_or_reason()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


#: The personas' password (the root conftest's user fixtures).
PASSWORD = "correct-horse-battery"


def sign_in(page, base_url: str, user) -> None:
    """Sign ``user`` in on ``page`` through the login form at ``base_url`` and wait for the
    page it lands on to settle."""
    page.goto(base_url + "/login/")
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
