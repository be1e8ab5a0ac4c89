"""Status that stops updating, in a real browser (the Debian ``chromium`` package driven by
Playwright) against Django's live test server: a deployment's Status panel whose 2 s poll fails
(the web server is down: the requests are aborted) says "not updating: stale since hh:mm:ss UTC"
instead of "updates every 2 s" and gives its ages as of that time; the next answered poll makes it
live again. The node page, rendered once beside the live socket, gives its agent's heartbeat age
as of the page's load while the socket is down (the WSGI test server has no ``/ws/live/``) and
plainly again, counted on, once the socket is live.
"""
from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone as dt_timezone

import pytest
from django.utils import timezone

from controlplane.tests.browser.conftest import sign_in
from deployments.models import Deployment, Node
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

LIVE_POLL = re.compile(r"/deployments/\d+/live/")
STALE_SINCE = re.compile(r"^not updating: stale since (\d\d:\d\d:\d\d) UTC$")


def _clocks_around(at: float) -> set[str]:
    """hh:mm:ss (UTC) of unix time ``at`` and the seconds either side (the browser's clock
    reads the answer a moment after this process noted it)."""
    return {(datetime.fromtimestamp(at, dt_timezone.utc) + timedelta(seconds=d)).strftime("%H:%M:%S")
            for d in (-1, 0, 1)}


@pytest.fixture
def ready_deployment(transactional_db) -> int:
    """A ready deployment on a node whose agent heartbeated just now; its id."""
    node = cpu_node_create(name="edge-box")
    Node.objects.filter(pk=node.pk).update(agent_heartbeat_at=timezone.now())
    node.refresh_from_db()  # the recipe's node, with the heartbeat
    pk = deployment_row_create(recipe=recipe_row_create(node=node, name="edge-single")).pk
    Deployment.objects.filter(pk=pk).update(ready_at=timezone.now())  # serving since now
    return pk


def test_it_marks_the_status_panel_stale_while_its_poll_fails(live_server, ready_deployment, viewer, browser):
    base = live_server.url
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    answered: list[float] = []
    page.on("response", lambda r: answered.append(time.time()) if LIVE_POLL.search(r.url) and r.status == 200 else None)
    sign_in(page, base, viewer)
    page.goto(f"{base}/deployments/{ready_deployment}/", wait_until="domcontentloaded")

    cadence = page.locator("#deployment-live [data-live-cadence]")
    heartbeat = page.locator("#deployment-live .facts [data-age]").first
    deadline = time.monotonic() + 6
    while not answered and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert answered, "no poll of the Status panel was answered"
    assert cadence.inner_text() == "updates every 2 s"
    assert re.fullmatch(r"\d+ s ago", heartbeat.inner_text()), heartbeat.inner_text()

    # The web server goes away: every poll fails to connect.
    page.route(LIVE_POLL, lambda route: route.abort("connectionrefused"))
    page.wait_for_function(
        "() => document.querySelector('#deployment-live [data-live-cadence]').textContent.startsWith('not updating')",
        timeout=6000)
    last_answer = answered[-1]
    since = STALE_SINCE.match(cadence.inner_text())
    assert since, cadence.inner_text()
    assert since.group(1) in _clocks_around(last_answer), (since.group(1), last_answer)
    assert page.locator("#deployment-live[data-stale-since]").count() == 1
    assert re.fullmatch(rf"\d+ s ago as of {since.group(1)} UTC", heartbeat.inner_text()), heartbeat.inner_text()
    # Every age the panel gives is as of that time (the heartbeat's, the creation's and the ready's), none is
    # left bare.
    ages = page.locator("#deployment-live [data-age]").all_inner_texts()
    assert ages and all(a.endswith(f" as of {since.group(1)} UTC") for a in ages), ages
    assert len([a for a in ages if a.endswith(f" ago as of {since.group(1)} UTC")]) == 3, ages  # heartbeat, created, ready
    # A ready deployment's "Serving for" stops counting and says as of when, and the agent is
    # online only as last seen then.
    serving = page.locator("#deployment-live .facts dt:text-is('Serving for') + dd")
    assert serving.inner_text().endswith(f" as of {since.group(1)} UTC"), serving.inner_text()
    agent = page.locator("#deployment-live .facts [data-stale-label]")
    assert agent.inner_text() == f"agent online (as last seen {since.group(1)} UTC)"
    # The marks stay while the polls keep failing, and are not added twice.
    page.wait_for_timeout(2500)
    assert cadence.inner_text() == since.group(0)
    assert heartbeat.inner_text().count(" as of ") == 1

    # Back: the next answered poll swaps in a live panel.
    page.unroute(LIVE_POLL)
    page.wait_for_function(
        "() => document.querySelector('#deployment-live [data-live-cadence]').textContent === 'updates every 2 s'",
        timeout=6000)
    assert page.locator("#deployment-live[data-stale-since]").count() == 0
    assert re.fullmatch(r"\d+ s ago", heartbeat.inner_text()), heartbeat.inner_text()
    assert agent.inner_text() == "agent online"
    assert errors == [], errors


@pytest.fixture
def online_node(transactional_db) -> str:
    """A node whose agent (pid 4321) heartbeated just now; its name."""
    node = cpu_node_create(name="edge-box")
    Node.objects.filter(pk=node.pk).update(agent_heartbeat_at=timezone.now(), agent_pid=4321)
    return node.name


def test_the_node_pages_heartbeat_is_as_of_its_load_while_the_socket_is_down(live_server, online_node, viewer, browser):
    base = live_server.url
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    sign_in(page, base, viewer)
    loaded_at = time.time()
    page.goto(f"{base}/nodes/{online_node}/", wait_until="domcontentloaded")

    # No /ws/live/ here: the socket is refused and the page says its agent line is not live.
    agent = page.locator("dd[data-follows-live]")
    page.wait_for_function("() => document.querySelector('dd[data-follows-live][data-stale-since]') !== null",
                           timeout=6000)
    m = re.fullmatch(r"last heartbeat (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC \((\d+ s ago) as of (\d\d:\d\d:\d\d) UTC\), pid 4321",
                     agent.inner_text())
    assert m, agent.inner_text()
    assert m.group(3) in _clocks_around(loaded_at), (m.group(3), loaded_at)
    assert page.locator(".page-head[data-follows-live][data-stale-since] .tag").inner_text() == \
        f"agent online (as last seen {m.group(3)} UTC)"

    # The socket is live again: the marks go, and the age counts on from the same heartbeat.
    page.evaluate("() => document.dispatchEvent(new CustomEvent('ceiling:live-state', {detail: {state: 'live'}}))")
    assert page.locator("[data-stale-since]").count() == 0
    assert page.locator("[data-agent-badge]").inner_text() == "agent online"
    assert re.fullmatch(rf"last heartbeat {m.group(1)} UTC \((just now|\d+ s ago)\), pid 4321", agent.inner_text()), agent.inner_text()
    assert errors == [], errors
