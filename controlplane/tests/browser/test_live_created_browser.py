"""Live pages ignore a message older than the object they show, in a real browser (the Debian
``chromium`` package driven by Playwright) against Django's live test server. A database
re-created at the same path reuses ids and node names, and Redis keeps a group's last messages
for an hour, so a message whose ``ts`` is before the object's ``created_at`` (the page's
``data-created``, whole unix seconds) was about another object: the deployment page and the node
page leave what they show as it is for one, streamed or in the subscription's snapshot, and
draw a newer one.

No websocket server: the page's ``/ws/live/`` is routed to the test, which speaks for it.
"""
from __future__ import annotations

import json
import re
import time

import pytest

from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

PASSWORD = "correct-horse-battery"  # the personas' password (conftest.py)


@pytest.fixture
def ready(transactional_db) -> dict:
    """A ready deployment on a CPU-only node; its id and the node's name (made before the browser
    starts: Playwright's sync API runs an event loop in this thread, where Django refuses
    database calls)."""
    node = cpu_node_create(name="again-box")
    deployment = deployment_row_create(recipe=recipe_row_create(node=node, name="again-sim"))
    return {"deployment": deployment.pk, "node": node.name}


def _open(browser, base: str, viewer, path: str):
    """The page at ``path``, signed in as the viewer, and its live socket (routed to the test)."""
    sockets: list = []
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.route_web_socket(re.compile(r".*/ws/live/.*"), lambda ws: sockets.append(ws))
    page.goto(f"{base}/login/?next={path}", wait_until="domcontentloaded")
    page.fill("#id_username", viewer.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}{path}", wait_until="load")
    for _ in range(100):
        if sockets:
            break
        page.wait_for_timeout(100)
    assert sockets, "the page opened no live socket"
    return page, sockets[0], errors


def _message(group: str, type_: str, seq: int, ts: float, data: dict) -> dict:
    return {"type": type_, "seq": seq, "group": group, "ts": ts, "data": data}


def _watch(page, selector: str) -> None:
    """Record every text the element at ``selector`` takes from now on (window.seen)."""
    page.evaluate("""sel => { window.seen = []; const el = document.querySelector(sel);
        new MutationObserver(() => window.seen.push(el.textContent))
          .observe(el, {childList: true, characterData: true, subtree: true}); }""", selector)


def test_the_deployment_page_ignores_a_message_older_than_the_deployment(live_server, ready, viewer, browser):
    page, ws, errors = _open(browser, live_server.url, viewer, f"/deployments/{ready['deployment']}/")
    panel = "#deployment-telemetry"
    created = int(page.get_attribute(panel, "data-created"))
    assert abs(created - time.time()) < 600, created
    group = page.get_attribute(panel, "data-group")
    badge = f'{panel} [data-f="status"]'
    assert page.inner_text(badge) == "—"
    _watch(page, badge)

    # The snapshot's kept message and a streamed one, both from before the deployment existed,
    # then a newer one: only the last is drawn.
    old_kept = _message(group, "deployment.status", 3, created - 1800, {"status": "stopped"})
    ws.send(json.dumps({"type": "live.subscribed", "groups": {group: {"seq": 3, "latest": {"deployment.status": old_kept}}}}))
    ws.send(json.dumps(_message(group, "deployment.status", 4, created - 1, {"status": "failed"})))
    ws.send(json.dumps(_message(group, "deployment.status", 5, created + 1, {"status": "starting"})))
    page.wait_for_function(f"() => document.querySelector('{badge}').textContent === 'starting'", timeout=10_000)
    seen = page.evaluate("() => window.seen")
    assert not any(s in ("stopped", "failed") for s in seen), seen
    assert errors == [], errors
    page.context.close()


def _node_sample(node: str, t: float) -> dict:
    return {"node": node, "t": t, "interval_s": 0.5, "gpus": [], "nvml": "ok",
            "host": {"cpu_pct": 12.0, "cpu_pct_per_numa": {"0": 12.0},
                     "memory": {"total_bytes": 16 * 2**30, "used_bytes": 2**30}}}


def test_the_node_page_ignores_a_sample_older_than_the_node(live_server, ready, viewer, browser):
    page, ws, errors = _open(browser, live_server.url, viewer, f"/nodes/{ready['node']}/")
    panel = "#node-live"
    created = int(page.get_attribute(panel, "data-created"))
    assert abs(created - time.time()) < 600, created
    group = page.get_attribute(panel, "data-group")

    # A sample of an earlier node of this name, then one of this node.
    ws.send(json.dumps({"type": "live.subscribed", "groups": {group: {"seq": 0, "latest": {}}}}))
    ws.send(json.dumps(_message(group, "node.sample", 1, created - 1800, _node_sample(ready["node"], created - 1800))))
    page.wait_for_timeout(500)
    assert page.evaluate(f"() => document.querySelector('{panel}')._sample === undefined")
    assert "no sample yet" in page.inner_text(f'{panel} [data-f="sample-age"]')
    now = time.time()
    ws.send(json.dumps(_message(group, "node.sample", 2, now, _node_sample(ready["node"], now))))
    page.wait_for_function(f"() => (document.querySelector('{panel}')._sample || {{}}).t === {now!r}", timeout=10_000)
    assert errors == [], errors
    page.context.close()
