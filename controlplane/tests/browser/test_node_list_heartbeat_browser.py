"""The nodes list's agent column, live, in a real browser (the Debian ``chromium`` package driven
by Playwright) against Django's live test server: while one node's agent heartbeats (the agent's
own ``node_heartbeat``, from a thread of the test) its row's "last seen" age stays small and its
badge "online" for longer than the server's offline limit, while a silent node's age counts up
and its badge turns "offline (no heartbeat for N s)" once the age passes that limit, without a
reload and with one read of the node list per heartbeat period. The node page writes the pid of
a restarted agent into its agent line.

The server's limit is lowered to ``OFFLINE_AFTER_S`` for the test; the page reads it from the
server, not from the test.
"""
from __future__ import annotations

import re
import time

import pytest
from django.utils import timezone

from controlplane.tests.browser.conftest import live_route, sign_in
from controlplane.tests.browser.test_node_heartbeat_browser import Heartbeats, _age_s, node_page_live
from deployments.models import Node
from deployments.tests.factories import cpu_node_create

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

OFFLINE_AFTER_S = 8
BRIEF_OFFLINE = re.compile(r"^offline \(no heartbeat for (\d+) s\)$")


@pytest.fixture
def two_nodes(transactional_db, settings) -> tuple[str, str]:
    """Two nodes whose agents heartbeated just now (pids 4321, 99), the server's offline limit at
    OFFLINE_AFTER_S and a heartbeat every second: (the beating one, the one that falls silent)."""
    settings.CEILING_HEARTBEAT_TIMEOUT_S = float(OFFLINE_AFTER_S)
    settings.CEILING_AGENT_HEARTBEAT_S = 1.0
    beating, silent = cpu_node_create(name="beat-row"), cpu_node_create(name="quiet-row")
    Node.objects.filter(pk=beating.pk).update(agent_heartbeat_at=timezone.now(), agent_pid=4321)
    Node.objects.filter(pk=silent.pk).update(agent_heartbeat_at=timezone.now(), agent_pid=99)
    return beating.name, silent.name


def _page(browser, live_server, viewer):
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    reads: list[str] = []
    page.on("request", lambda r: reads.append(r.url) if "/api/nodes/" in r.url else None)
    sign_in(page, live_server.url, viewer)
    return page, errors, reads


def test_each_rows_age_counts_and_its_badge_turns_offline_past_the_limit(live_server, two_nodes, viewer, browser):
    beating, silent = two_nodes
    with Heartbeats(beating) as heartbeats:
        page, errors, reads = _page(browser, live_server, viewer)
        page.goto(f"{live_server.url}/nodes/", wait_until="domcontentloaded")
        line = {name: page.locator(f'[data-heartbeat-of="{name}"]') for name in two_nodes}
        badge = {name: page.locator(f'[data-agent-badge="{name}"]') for name in two_nodes}
        assert line[silent].get_attribute("data-offline-after") == str(OFFLINE_AFTER_S)  # the server's limit
        assert badge[silent].inner_text() == "online"
        page.evaluate("() => { window.notReloaded = true; }")
        started = time.monotonic()

        # The silent node's age counts up every second, from the page's own clock.
        page.wait_for_function(
            "n => /^[2-9] s ago$/.test(document.querySelector(`[data-heartbeat-of=\"${n}\"] [data-age]`).textContent)",
            arg=silent, timeout=10_000)
        # For longer than the limit the beating node stays online with a small age.
        ages: list[int] = []
        while time.monotonic() - started < OFFLINE_AFTER_S + 3:
            ages.append(_age_s(line[beating].locator("[data-age]").inner_text()))
            assert badge[beating].inner_text() == "online"
            page.wait_for_timeout(500)
        assert max(ages) < OFFLINE_AFTER_S - 2, ages

        # The silent one is offline past the limit, counting on.
        page.wait_for_function(
            "n => /^offline \\(no heartbeat for \\d+ s\\)$/.test(document.querySelector(`[data-agent-badge=\"${n}\"]`).textContent)",
            arg=silent, timeout=20_000, polling=250)
        shown = int(BRIEF_OFFLINE.match(badge[silent].inner_text()).group(1))
        assert shown > OFFLINE_AFTER_S - 1, badge[silent].inner_text()
        classes = badge[silent].get_attribute("class").split()
        assert "bad" in classes and "ok" not in classes
        assert _age_s(line[silent].locator("[data-age]").inner_text()) >= OFFLINE_AFTER_S
        page.wait_for_function(
            "([n, s]) => { const m = /(\\d+) s\\)$/.exec(document.querySelector(`[data-agent-badge=\"${n}\"]`).textContent);"
            " return m && +m[1] > s; }", arg=[silent, shown], timeout=10_000)

        # One read of the list per heartbeat period, never one per node.
        listed = [u for u in reads if re.search(r"/api/nodes/\?limit=\d+$", u)]
        assert listed and all(re.search(r"/api/nodes/\?", u) for u in reads), reads
        assert len(listed) <= time.monotonic() - started + 3, len(listed)
        assert page.evaluate("() => window.notReloaded === true")
        assert page.locator("[data-stale-since]").count() == 0
        assert errors == [], errors
        page.context.close()


def test_the_node_page_shows_a_restarted_agents_pid(live_server, two_nodes, viewer, browser):
    beating, _ = two_nodes
    page, errors, _reads = _page(browser, live_server, viewer)
    node_page_live(page, live_route(page, pong=True), f"{live_server.url}/nodes/{beating}/")
    line = page.locator("dd[data-heartbeat-of]")
    assert line.inner_text().endswith(", pid 4321"), line.inner_text()

    # The agent restarts: a new process heartbeats.
    with Heartbeats(beating, pid=5678):
        page.wait_for_function("() => document.querySelector('dd[data-heartbeat-of]').textContent.endsWith(', pid 5678')",
                               timeout=15_000)
        assert re.fullmatch(r"last heartbeat \S+ \S+ UTC \((just now|\d+ s ago)\), pid 5678", line.inner_text()), line.inner_text()
    assert errors == [], errors
    page.context.close()
