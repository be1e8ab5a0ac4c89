"""What every browser test shares: the Debian ``chromium`` package driven by Playwright
(:func:`browser`), and, when either is missing, a failure with how to install them in CI and as
root (where ``scripts/system-deps.sh`` installs chromium), a skip with that reason elsewhere;
signing in, database calls off the page's thread, and a page's live socket routed to the test."""
from __future__ import annotations

import json
import os
import re
import threading
import time

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


def sign_in_to(page, base_url: str, user, path: str) -> None:
    """Sign ``user`` in through the login page's ``?next=`` and wait until ``path`` has loaded
    (its DOM, not every poll: live pages never go quiet)."""
    page.goto(f"{base_url}/login/?next={path}", wait_until="domcontentloaded")
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}{path}", wait_until="domcontentloaded")


def in_thread(query):
    """What ``query()`` returns, called on another thread: Playwright's sync API runs an event loop
    in the test's thread, where Django refuses database calls."""
    result = []
    thread = threading.Thread(target=lambda: result.append(query()))
    thread.start()
    thread.join()
    return result[0]


def live_route(page, *, pong: bool = False) -> list:
    """Route the page's ``/ws/live/`` to the test (no websocket server); the list each socket the
    page opens is appended to. With ``pong`` every socket answers each ping as the server does,
    so the page stays live."""
    sockets: list = []

    def opened(ws) -> None:
        if pong:
            def answer(message) -> None:
                if json.loads(message).get("action") == "ping":
                    ws.send(json.dumps({"type": "live.pong", "t": time.time()}))
            ws.on_message(answer)
        sockets.append(ws)

    page.route_web_socket(re.compile(r".*/ws/live/.*"), opened)
    return sockets


def live_socket_wait(page, sockets: list, *, what: str = "the page", tries: int = 100) -> None:
    """Wait until the page has opened a live socket (``tries`` waits of 0.1 s at most)."""
    for _ in range(tries):
        if sockets:
            break
        page.wait_for_timeout(100)
    assert sockets, f"{what} opened no live socket"


def live_subscribed(ws, group: str) -> None:
    """Answer the socket's subscription: ``group`` subscribed, nothing sent on it yet."""
    ws.send(json.dumps({"type": "live.subscribed", "groups": {group: {"seq": 0, "latest": {}}}}))
