"""The wall while its data is not live, in a real browser (the Debian ``chromium`` package driven
by Playwright) against Django's live test server. The page's ``/ws/live/`` is routed to the test,
which speaks for the server (:class:`Server` of the stale badges test: up, it answers the
subscription with the latest sample of each node and pongs; down, every HTTP request of the page
is refused and every socket closed as it opens).

* A node whose samples stop (its agent died, the socket still up) has its green "agent online"
  badge greyed out ("unconfirmed") with the time of its last sample, like a deployment's status and
  health badges, and confirmed again by the next sample.
* After the server restarts, the wall is live again within seconds, long before its socket's
  back-off would try again (at least 11 s after the fifth refused socket): while it is not live it
  asks the server a light question every 2 s, and the first answer has the socket retried at once.
  Answered 403 (the account lost its viewer role meanwhile), the wall says "no access" at once,
  as the live client's own session check does, rather than reconnecting.
"""
from __future__ import annotations

import json
import re
import time

import pytest
from django.utils import timezone

from controlplane.tests.browser.conftest import sign_in
from controlplane.tests.browser.test_stale_badges_browser import BACK_WITHIN_S, REFUSALS, Server
from deployments.models import Node
from deployments.tests.factories import cpu_node_create

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]

NODE = "wall-box"
BADGE = f'.node-tile[data-node="{NODE}"] [data-f="agent"]'
STATUS = ".wall-head [data-live-status]"
NO_SAMPLE_SINCE = r"^no sample since \d\d:\d\d:\d\d UTC$"


@pytest.fixture
def online_node(transactional_db) -> str:
    """A node whose agent heartbeated just now: its wall tile says "agent online"."""
    node = cpu_node_create(name=NODE)
    Node.objects.filter(pk=node.pk).update(agent_heartbeat_at=timezone.now(), agent_pid=4321)
    return node.name


def _sample(t: float) -> dict:
    return {"node": NODE, "t": t, "interval_s": 0.5, "gpus": [], "nvml": "ok",
            "host": {"cpu_pct": 12.0, "cpu_pct_per_numa": {"0": 12.0},
                     "memory": {"total_bytes": 16 * 2**30, "used_bytes": 2**30}}}


def _latest(group: str) -> dict:
    if group != f"node-{NODE}":
        return {}
    now = time.time()
    return {"node.sample": {"type": "node.sample", "seq": 1, "group": group, "ts": now, "data": _sample(now)}}


def _open_wall(browser, base: str, viewer):
    page = browser.new_context(viewport={"width": 1920, "height": 1080}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    server = Server(page, _latest)
    sign_in(page, base, viewer)
    page.goto(base + "/wall/", wait_until="domcontentloaded")
    page.wait_for_function("sel => document.querySelector(sel).textContent === 'updates connected'",
                           arg=STATUS, timeout=20_000)
    return page, server, errors


def _confirmed(page) -> bool:
    return page.evaluate("sel => { const b = document.querySelector(sel);"
                         " return b.textContent === 'agent online' && b.classList.contains('ok')"
                         " && !b.classList.contains('unconfirmed') && b.title === ''; }", BADGE)


def _wait_unconfirmed(page, timeout_s: float) -> None:
    page.wait_for_function(
        "([sel, re]) => { const b = document.querySelector(sel);"
        " return b.classList.contains('unconfirmed') && new RegExp(re).test(b.title); }",
        arg=[BADGE, NO_SAMPLE_SINCE], timeout=timeout_s * 1000, polling=200)


def test_the_walls_node_badge_greys_out_while_its_samples_stop(live_server, online_node, viewer, browser):
    page, server, errors = _open_wall(browser, live_server.url, viewer)
    page.wait_for_function("sel => /^sample at /.test(document.querySelector(sel).textContent)",
                           arg=f'.node-tile[data-node="{NODE}"] [data-f="sample-age"]', timeout=5_000)
    assert _confirmed(page)

    # No sample for 3 intervals (at least 5 s), the socket still live: the badge is no live fact.
    _wait_unconfirmed(page, timeout_s=10)
    assert page.locator(STATUS).inner_text() == "updates connected"
    assert page.locator(BADGE).inner_text() == "agent online"

    # The next sample confirms it again.
    now = time.time()
    server.socket.send(json.dumps({"type": "node.sample", "seq": 2, "group": f"node-{NODE}", "ts": now,
                                   "data": _sample(now)}))
    page.wait_for_function(
        "sel => { const b = document.querySelector(sel); return !b.classList.contains('unconfirmed') && b.title === ''; }",
        arg=BADGE, timeout=3_000, polling=200)
    assert _confirmed(page)
    assert errors == [], errors
    page.context.close()


def test_the_wall_is_live_again_within_seconds_of_its_server_coming_back(live_server, online_node, viewer, browser):
    page, server, errors = _open_wall(browser, live_server.url, viewer)
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/api/" in r.url else None)

    server.stop()
    page.wait_for_function("sel => document.querySelector(sel).textContent.startsWith('reconnecting… stale since ')",
                           arg=STATUS, timeout=10_000)
    assert page.locator(".wall-stale-banner").is_visible()
    assert page.locator(".wall-stale-banner").inner_text().endswith("greyed out. Reconnecting by itself.")
    _wait_unconfirmed(page, timeout_s=10)  # the node badge too, as the deployments' badges

    # Down for a while: the socket backs off; the light question is asked meanwhile, unanswered.
    deadline = time.monotonic() + 60
    while len(server.refused) < REFUSALS and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert len(server.refused) >= REFUSALS, server.refused
    gaps = [b - a for a, b in zip(server.refused, server.refused[1:])]
    assert gaps[-1] > 4, gaps  # the fifth waited out a back-off of 8 s +- 25 %
    assert any(re.search(r"/api/nodes/\?limit=1$", url) for url in asked), asked

    server.start()
    back = time.monotonic()
    page.wait_for_function("sel => document.querySelector(sel).textContent === 'updates connected'",
                           arg=STATUS, timeout=BACK_WITHIN_S * 1000, polling=200)
    assert time.monotonic() - back < BACK_WITHIN_S
    assert not page.locator(".wall-stale-banner").is_visible()
    # Live again, it stops asking.
    page.wait_for_timeout(500)
    count = len(asked)
    page.wait_for_timeout(4500)
    assert [url for url in asked[count:] if "limit=1" in url] == [], asked[count:]
    assert errors == [], errors
    page.context.close()


def test_the_walls_question_answered_403_says_no_access(live_server, online_node, viewer, browser):
    page, server, errors = _open_wall(browser, live_server.url, viewer)
    server.stop()
    page.wait_for_function("sel => document.querySelector(sel).textContent.startsWith('reconnecting… stale since ')",
                           arg=STATUS, timeout=10_000)
    # Down long enough that the socket waits out a back-off of seconds between tries.
    deadline = time.monotonic() + 60
    while len(server.refused) < REFUSALS and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert len(server.refused) >= REFUSALS, server.refused

    # Back, but the account has no role any more: the light question is answered 403.
    page.route(re.compile(r".*/api/nodes/\?limit=1$"),
               lambda route: route.fulfill(status=403, content_type="application/json",
                                           body=json.dumps({"detail": "You do not have permission to perform this action."})))
    asked = time.monotonic()
    page.wait_for_function("sel => document.querySelector(sel).textContent.startsWith('no access: ')",
                           arg=STATUS, timeout=4_000, polling=200)
    assert time.monotonic() - asked < 4
    assert page.locator(STATUS).get_attribute("data-state") == "signed-out"
    # The banner no longer promises to reconnect: nothing will until the user acts.
    assert page.locator(".wall-stale-banner").inner_text().endswith(
        "greyed out. Updates stopped: the status above says why and what to do.")
    assert errors == [], errors
    page.context.close()
