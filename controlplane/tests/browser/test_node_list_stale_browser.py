"""The nodes list while its server is away, in a real browser (the Debian ``chromium`` package
driven by Playwright) against Django's live test server. The list has no live socket: its agent
column is kept up to date by re-reading the nodes every heartbeat period. "The server is down" is
every HTTP request of the page refused (:class:`Server` of the stale badges test).

While down, the line over the table reads "not updating: stale since hh:mm:ss UTC" instead of
"re-read every 1 s", and each node's badge "online (as last seen hh:mm:ss UTC)" rather than a
green "online"; once the server is back, the next read clears both within seconds.
"""
from __future__ import annotations

import re
import time

import pytest
from django.utils import timezone

from controlplane.tests.browser.conftest import sign_in
from controlplane.tests.browser.test_stale_badges_browser import LAST_SEEN, Server
from deployments.models import Node
from deployments.tests.factories import cpu_node_create

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

CADENCE = "[data-heartbeat-scope] [data-live-cadence]"
STALE_SINCE = r"^not updating: stale since \d\d:\d\d:\d\d UTC$"


@pytest.fixture
def two_online_nodes(transactional_db, settings) -> tuple[str, str]:
    """Two nodes whose agents heartbeated just now, read every second, online for 10 min."""
    settings.CEILING_AGENT_HEARTBEAT_S = 1.0
    settings.CEILING_HEARTBEAT_TIMEOUT_S = 600.0
    names = []
    for name in ("rack-a", "rack-b"):
        node = cpu_node_create(name=name)
        Node.objects.filter(pk=node.pk).update(agent_heartbeat_at=timezone.now(), agent_pid=4321)
        names.append(name)
    return names[0], names[1]


def _badges(page) -> list[str]:
    return page.locator("[data-agent-badge]").all_inner_texts()


def test_the_nodes_list_says_it_is_stale_and_its_badges_read_as_last_seen_while_its_server_is_down(
        live_server, two_online_nodes, viewer, browser):
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    server = Server(page)
    sign_in(page, live_server.url, viewer)
    page.goto(live_server.url + "/nodes/", wait_until="domcontentloaded")
    assert page.locator(CADENCE).inner_text() == "re-read every 1 s"
    assert _badges(page) == ["online", "online"]
    badge = page.locator('[data-agent-badge="rack-a"]')
    assert "ok" in badge.get_attribute("class").split()

    server.stop()
    page.wait_for_function(
        "([sel, re]) => new RegExp(re).test(document.querySelector(sel).textContent)",
        arg=[CADENCE, STALE_SINCE], timeout=10_000, polling=200)
    page.wait_for_function(
        "re => [...document.querySelectorAll('[data-agent-badge]')].every(b => new RegExp(re).test(b.textContent))",
        arg=LAST_SEEN, timeout=5_000, polling=200)
    for shown in _badges(page):
        assert re.fullmatch("online" + LAST_SEEN, shown), shown
    # The badges stay that way while the server is away (the once-a-second tick does not repaint them).
    page.wait_for_timeout(2500)
    assert all(re.fullmatch("online" + LAST_SEEN, shown) for shown in _badges(page)), _badges(page)
    assert re.fullmatch(STALE_SINCE, page.locator(CADENCE).inner_text())

    server.start()
    back = time.monotonic()
    page.wait_for_function(
        "sel => document.querySelector(sel).textContent === 're-read every 1 s'"
        " && [...document.querySelectorAll('[data-agent-badge]')].every(b => b.textContent === 'online')"
        " && document.querySelector('[data-stale-since]') === null",
        arg=CADENCE, timeout=6_000, polling=200)
    assert time.monotonic() - back < 6
    assert "ok" in badge.get_attribute("class").split()
    assert errors == [], errors
    page.context.close()
