"""The wall draws a new deployment's tile, and drops an ended one, as soon as its node's group
carries ``deployment.roster``, and a node it did not know as soon as the nodes' roster group
carries ``node.roster``, not at its next 10 s re-fetch, in a real browser (the Debian
``chromium`` package driven by Playwright) against Django's live test server.

No websocket server: the page's ``/ws/live/`` is routed to the test, which speaks for it.
"""
from __future__ import annotations

import json
import time

import pytest

from deployments.choices import DeploymentStatus
from deployments.models import Deployment
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

from .conftest import in_thread, live_route, live_socket_wait, live_subscribed, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


@pytest.fixture
def node(transactional_db) -> str:
    return cpu_node_create(name="roster-box").name


def _open_wall(browser, live_server, viewer):
    """The wall, signed in as the viewer, its live socket (routed to the test) and its page errors."""
    page = browser.new_context(viewport={"width": 1920, "height": 1080}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    sockets = live_route(page)
    sign_in(page, live_server.url, viewer)
    page.goto(f"{live_server.url}/wall/", wait_until="load")
    live_socket_wait(page, sockets, what="the wall")
    return page, sockets[0], errors


def _deploy(node_name: str) -> int:
    from deployments.models import Node

    return deployment_row_create(recipe=recipe_row_create(node=Node.objects.get(name=node_name), name="roster-sim")).pk


def _end(pk: int) -> None:
    Deployment.objects.filter(pk=pk).update(status=DeploymentStatus.STOPPED, ended_at=None)


def test_the_wall_redraws_its_tiles_on_a_roster_message(live_server, node, viewer, browser):
    page, ws, errors = _open_wall(browser, live_server, viewer)
    group = f"node-{node}"
    live_subscribed(ws, group)
    page.wait_for_timeout(300)  # past the page's first re-fetch, if it makes one
    started = time.monotonic()
    pk = in_thread(lambda: _deploy(node))
    tile = f'.wall-tile[data-group="deployment-{pk}"]'
    page.wait_for_timeout(1000)
    assert page.locator(tile).count() == 0, "drawn without a message: the test would not show the message's effect"

    ws.send(json.dumps({"type": "deployment.roster", "seq": 1, "group": group, "ts": time.time(),
                        "data": {"deployment_id": pk, "status": "ready"}}))
    page.wait_for_selector(tile, timeout=3_000)
    assert time.monotonic() - started < 8, "drawn by the 10 s re-fetch, not by the message"

    # Ended with no end time: it leaves the live tiles (and, undated, the ended strip too).
    in_thread(lambda: _end(pk))
    started = time.monotonic()
    ws.send(json.dumps({"type": "deployment.roster", "seq": 2, "group": group, "ts": time.time(),
                        "data": {"deployment_id": pk, "status": "stopped"}}))
    page.wait_for_selector(tile, state="detached", timeout=3_000)
    assert time.monotonic() - started < 8
    assert not errors, errors


def test_the_wall_draws_a_node_it_did_not_know_on_a_node_roster_message(live_server, transactional_db, viewer, browser):
    page, ws, errors = _open_wall(browser, live_server, viewer)
    # No node yet: the wall follows the nodes' roster group, which names none.
    assert "sub=roster-nodes" in ws.url, ws.url
    live_subscribed(ws, "roster-nodes")
    page.wait_for_timeout(300)
    started = time.monotonic()
    in_thread(lambda: cpu_node_create(name="brand-new-box"))
    tile = '.wall-tile[data-group="node-brand-new-box"]'
    page.wait_for_timeout(1000)
    assert page.locator(tile).count() == 0, "drawn without a message: the test would not show the message's effect"

    ws.send(json.dumps({"type": "node.roster", "seq": 1, "group": "roster-nodes", "ts": time.time(),
                        "data": {"node": "brand-new-box", "event": "registered"}}))
    page.wait_for_selector(tile, timeout=3_000)
    assert time.monotonic() - started < 8, "drawn by the 10 s re-fetch, not by the message"
    assert not errors, errors
