"""A sweep page opened before its sweep starts, in a real browser against the real stack
(daphne, the control worker, the node agent, the ``sim`` engines): Started and Ended appear
without a reload, with the values the API gives, and the header's buttons do not move.

The control worker is stopped while the sweep is created, so the page is open while it waits.
"""
from __future__ import annotations

import json
import re
import urllib.request
from datetime import datetime, timezone as tz

import pytest

from controlplane.tests.browser.test_live_browser import _wait_text, local_pd, stack  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_sweep_page_left_open_fills_started_and_ended(stack, local_pd, browser):  # noqa: F811
    username, password = stack.demo_login()
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{stack.base_url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{stack.base_url}/recipes/")
    page.click("a:text-is('local-sim-pd')")
    page.click("button:has-text('Deploy')")
    page.wait_for_url(re.compile(r"/deployments/\d+/$"))
    _wait_text(page, "#deployment-live .status-line .tag", "^ready$", timeout_s=90)

    stack.stop("worker")  # the sweep waits, pending, while its page is open
    page.reload()
    page.click("a:has-text('Run a sweep')")
    page.fill("#id_concurrency", "2")
    page.fill("#id_lengths", "32:16")
    page.fill("#id_duration", "3")
    page.click("button:has-text('Start sweep')")
    page.wait_for_url(re.compile(r"/benchmarks/sweeps/\d+/$"))
    sweep_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    assert page.locator("[data-sweep-started]").inner_text() == "not yet"
    assert page.locator("[data-sweep-ended]").inner_text() == "not yet"
    buttons = page.locator(".page-head .actions").first
    head = page.locator("main .page-head").first
    # where the buttons sit in the header: the page above it moves up once the sweep leaves the
    # queue and its "Sweep #N queued." message goes
    before = buttons.bounding_box()
    before["y"] -= head.bounding_box()["y"]

    stack.start("worker")
    _wait_text(page, "#sweep-progress .status-line .tag", "^done$", timeout_s=120)
    page.wait_for_function("() => /^\\d{4}-/.test(document.querySelector('[data-sweep-ended]').textContent.trim())",
                           timeout=10_000, polling=100)
    cookies = "; ".join(f"{c['name']}={c['value']}" for c in context.cookies())
    request = urllib.request.Request(f"{stack.base_url}/api/sweeps/{sweep_id}/", headers={"Cookie": cookies})
    with urllib.request.urlopen(request, timeout=10) as r:
        body = json.loads(r.read())

    def utc(value: str) -> str:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(tz.utc).strftime("%Y-%m-%d %H:%M:%S")

    assert page.locator("[data-sweep-started]").inner_text() == utc(body["started_at"])
    assert page.locator("[data-sweep-ended]").inner_text() == utc(body["ended_at"])
    after = buttons.bounding_box()
    after["y"] -= head.bounding_box()["y"]
    assert page.locator("main .messages").count() == 0   # the queued message went with the queue
    assert (after["x"], after["y"], after["height"]) == (before["x"], before["y"], before["height"]), (before, after)
    assert page.locator("[data-whatif-link]").is_visible()
    context.close()
    assert errors == [], errors
