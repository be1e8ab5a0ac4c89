"""The node page's agent heartbeat, live, in a real browser (the Debian ``chromium`` package driven
by Playwright) against Django's live test server: while the agent heartbeats (the agent's own
``node_heartbeat``, from a thread of the test) the page's age of the last heartbeat stays small
and its badge says "agent online" for longer than the server's offline limit; once the heartbeats
stop, the age counts up and the badge turns "agent offline (no heartbeat for N s)" when the age
passes that limit, without a reload.

No websocket server: the page's ``/ws/live/`` is routed to the test, which keeps it live (it
answers the subscription and every ping). The server's limit is lowered to
``OFFLINE_AFTER_S`` for the test; the page reads it from the server, not from the test.
"""
from __future__ import annotations

import re
import threading
import time

import pytest
from django.db import connection
from django.utils import timezone

from controlplane.tests.browser.conftest import live_route, live_socket_wait, live_subscribed, sign_in
from deployments.models import Node
from deployments.nodes import node_heartbeat
from deployments.tests.factories import cpu_node_create

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

OFFLINE_AFTER_S = 10
AGE = re.compile(r"^(?:just now|(\d+) s ago)$")
OFFLINE = re.compile(r"^agent offline \(no heartbeat for (\d+) s\)$")


@pytest.fixture
def beating_node(transactional_db, settings) -> str:
    """A node whose agent (pid 4321) heartbeated just now, with the server's offline limit at
    OFFLINE_AFTER_S and a heartbeat every second; its name."""
    settings.CEILING_HEARTBEAT_TIMEOUT_S = float(OFFLINE_AFTER_S)
    settings.CEILING_AGENT_HEARTBEAT_S = 1.0
    node = cpu_node_create(name="beat-box")
    Node.objects.filter(pk=node.pk).update(agent_heartbeat_at=timezone.now(), agent_pid=4321)
    return node.name


class Heartbeats:
    """The agent's heartbeat of node ``name`` (process ``pid``) every half second, from a thread
    (Playwright's sync API runs an event loop in the test's thread, where Django refuses database
    calls)."""

    def __init__(self, name: str, pid: int = 4321) -> None:
        self.name = name
        self.pid = pid
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.last = None

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                node_heartbeat(name=self.name, pid=self.pid)
                self.last = time.time()
                self.stopping.wait(0.5)
        finally:
            connection.close()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> float:
        """Stop; the unix time of the last heartbeat."""
        self.stopping.set()
        self.thread.join(timeout=30)
        return self.last

    def __enter__(self) -> Heartbeats:
        """Beating until the block is left (or :meth:`stop` is called in it)."""
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def node_page_live(page, sockets: list, url: str) -> None:
    """Open the node page at ``url`` and answer its live socket's subscription (``sockets`` from
    :func:`live_route`, with pongs, so the page stays live)."""
    page.goto(url, wait_until="domcontentloaded")
    live_socket_wait(page, sockets, tries=200)
    live_subscribed(sockets[-1], page.get_attribute("#node-live", "data-group"))


def _age_s(text: str) -> int:
    m = AGE.match(text)
    assert m, text
    return int(m.group(1) or 0)


def test_the_heartbeat_age_stays_small_while_it_beats_and_the_badge_turns_offline_when_it_stops(
        live_server, beating_node, viewer, browser):
    base = live_server.url
    with Heartbeats(beating_node) as heartbeats:
        page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        sockets = live_route(page, pong=True)
        sign_in(page, base, viewer)
        node_page_live(page, sockets, f"{base}/nodes/{beating_node}/")
        page.wait_for_function("() => document.documentElement.getAttribute('data-live-state') === 'live'",
                               timeout=20_000)
        line = page.locator("dd[data-heartbeat-of]")
        age = line.locator("[data-age]")
        badge = page.locator("[data-agent-badge]")
        assert line.get_attribute("data-offline-after") == str(OFFLINE_AFTER_S)  # the server's limit
        page.evaluate("() => { window.notReloaded = true; }")

        # Beating: for longer than the limit the age stays small, the badge online, and the time
        # of the last heartbeat moves on (the page reads the new ones).
        first_time = line.locator("time").get_attribute("datetime")
        ages: list[int] = []
        until = time.monotonic() + OFFLINE_AFTER_S + 4
        while time.monotonic() < until:
            ages.append(_age_s(age.inner_text()))
            assert badge.inner_text() == "agent online"
            page.wait_for_timeout(500)
        assert max(ages) < OFFLINE_AFTER_S - 2, ages
        page.wait_for_function("t => document.querySelector('dd[data-heartbeat-of] time').getAttribute('datetime') !== t",
                               arg=first_time, timeout=20_000)
        assert page.locator("[data-stale-since]").count() == 0

        # The heartbeats stop: the age counts up and the badge turns offline past the limit.
        stopped_at = heartbeats.stop()
        page.wait_for_function(
            "() => /^agent offline \\(no heartbeat for \\d+ s\\)$/.test(document.querySelector('[data-agent-badge]').textContent)",
            timeout=60_000, polling=250)
        offline = OFFLINE.match(badge.inner_text())
        assert int(offline.group(1)) > OFFLINE_AFTER_S - 1, badge.inner_text()
        assert time.time() - stopped_at > OFFLINE_AFTER_S - 2  # not before the limit (browser clock rounding aside)
        assert "bad" in badge.get_attribute("class") and "ok" not in badge.get_attribute("class").split()
        seen = _age_s(age.inner_text())
        assert seen >= OFFLINE_AFTER_S, age.inner_text()
        page.wait_for_function(
            "n => { const m = /^(\\d+) s ago$/.exec(document.querySelector('dd[data-heartbeat-of] [data-age]').textContent);"
            " return m && +m[1] > n; }", arg=seen, timeout=20_000)
        page.wait_for_function(
            "n => { const m = /(\\d+) s\\)$/.exec(document.querySelector('[data-agent-badge]').textContent);"
            " return m && +m[1] > n; }", arg=int(offline.group(1)), timeout=20_000)
        assert page.evaluate("() => window.notReloaded === true")
        assert page.locator("[data-stale-since]").count() == 0
        assert errors == [], errors
        page.context.close()
