"""The sweep page's live panel in a real browser (the Debian chromium package through Playwright):
it draws the progress the status block embeds as soon as the page loads, before any websocket
message, the same point and counts as that block; and a report older than the one it shows,
arriving later on the socket (here a routed /ws/live/ the test speaks for), leaves it as it is,
while a newer one is drawn; and after the socket closes and comes back, the re-sync's
/api/sweeps/<id>/ progress brings counts the rows gained meanwhile. A point limited by time reads
as the terminal's progress line says it (``42 done of 44 sent so far, time-limited``)."""
from __future__ import annotations

import json
import re
import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from controlplane.tests.browser.conftest import browser  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(120),
              pytest.mark.django_db(transaction=True)]

PANEL = "#sweep-live"


def _iso(t) -> str:
    return t.isoformat().replace("+00:00", "Z")


@pytest.fixture
def running(admin_user) -> dict:
    """A running sweep whose first point's rows hold a report (7 of 10 requests, 1 failed), made
    before the browser starts (Playwright's sync API runs an event loop in this thread, where
    Django refuses database calls)."""
    stored = timezone.now() - timedelta(seconds=2)
    sweep = BenchmarkSweep.objects.create(status=SweepStatus.RUNNING, points_total=2, requests_total=20,
                                          grid={"concurrency": [2, 4], "lengths": [[8, 8]], "requests": 10},
                                          current_point="c=2 8/8", requests_done=7, current_tok_s=80.0,
                                          started_at=stored - timedelta(seconds=5), created_by=admin_user)
    run = BenchmarkRun.objects.create(
        sweep=sweep, ordinal=0, status=RunStatus.RUNNING, concurrency=2, input_len=8, output_len=8,
        num_requests=10, progress={"done": 7, "total": 10, "failed": 1, "output_tokens": 56, "elapsed_s": 1.4,
                                   "tok_s": 80.0, "tok_s_mean": 40.0, "duration_s": None,
                                   "total_sent_so_far": False, "updated_at": _iso(stored)})
    return {"sweep_id": sweep.pk, "run_id": run.pk, "stored": stored}


def _report(running: dict, *, done: int, updated_at, seq: int) -> str:
    data = {"sweep_id": running["sweep_id"], "run_id": running["run_id"], "point_index": 0, "points_total": 2,
            "done": done, "total": 10, "failed": 1, "output_tokens": done * 8, "elapsed_s": 1.0 + done / 10,
            "tok_s": 80.0, "tok_s_mean": 40.0, "point": "c=2 8/8", "duration_s": None,
            "total_sent_so_far": False, "requests_done": done, "updated_at": _iso(updated_at)}
    return json.dumps({"type": "sweep.progress", "seq": seq, "group": f"sweep-{running['sweep_id']}",
                       "ts": time.time(), "data": data})


def test_the_live_panel_draws_the_embedded_progress_at_load_and_keeps_it_over_an_older_report(
        live_server, running, admin_user, browser) -> None:  # noqa: F811
    sockets: list = []
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    # The page's socket reaches the test, not a server: nothing is sent on it until said below.
    page.route_web_socket(re.compile(r".*/ws/live/.*"), lambda ws: sockets.append(ws))
    page.goto(live_server.url + "/login/")
    page.fill("input[name=username]", admin_user.username)
    page.fill("input[name=password]", "correct-horse-battery")
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
    page.goto(f"{live_server.url}/benchmarks/sweeps/{running['sweep_id']}/", wait_until="load")

    # At load, with no message yet: shown, and the status block's point and counts.
    shown = page.evaluate(f"""() => {{
      const panel = document.querySelector('{PANEL}'), f = n => panel.querySelector('[data-f="' + n + '"]').textContent;
      return {{hidden: panel.hidden, point: f('point'), requests: f('requests'), failed: f('failed'),
              age: f('sample-age'), block: document.querySelector('#sweep-progress .run-progress').textContent,
              current: document.querySelector('#sweep-progress .current-tok-s').textContent,
              embedded: JSON.parse(document.querySelector('#sweep-progress-message').textContent)}};
    }}""")
    assert not shown["hidden"], shown
    assert shown["point"].startswith("1 of 2") and "c=2 8/8" in shown["point"] and "c=2 8/8" in shown["current"], shown
    assert "7 / 10" in shown["requests"] and "7 / 10 requests done" in shown["block"], shown
    assert shown["failed"].startswith("1") and "1 failed" in shown["block"], shown
    stamp = running["stored"].strftime("%H:%M:%S")
    assert stamp in shown["age"] and f"as of {stamp} UTC" in shown["block"], shown
    assert shown["embedded"]["done"] == 7 and shown["embedded"]["updated_at"] == _iso(running["stored"])

    # Every text the requests field takes from here on.
    page.evaluate(f"""() => {{
      window.seenRequests = [];
      const el = document.querySelector('{PANEL} [data-f="requests"]');
      new MutationObserver(() => window.seenRequests.push(el.textContent))
        .observe(el, {{childList: true, characterData: true, subtree: true}});
    }}""")
    assert sockets, "the page opened no live socket"
    ws = sockets[0]
    group = f"sweep-{running['sweep_id']}"
    ws.send(json.dumps({"type": "live.subscribed", "groups": {group: {"seq": 0, "latest": {}}}}))
    # An older report (made before the stored one) arrives after the page drew the stored one,
    # then a newer one.
    ws.send(_report(running, done=3, updated_at=running["stored"] - timedelta(seconds=1), seq=1))
    ws.send(_report(running, done=9, updated_at=running["stored"] + timedelta(seconds=1), seq=2))
    page.wait_for_function(f"""() => document.querySelector('{PANEL} [data-f="requests"]')
                                        .textContent.includes('9 / 10')""", timeout=10_000)
    seen = page.evaluate("() => window.seenRequests")
    assert not any("3 / 10" in s for s in seen), seen
    # the status block's next poll (its rows still at 7) does not take the panel back either
    page.wait_for_timeout(1500)
    after = page.evaluate(f"""() => ({{requests: document.querySelector('{PANEL} [data-f="requests"]').textContent,
                                       seen: window.seenRequests}})""")
    assert "9 / 10" in after["requests"] and not any("7 / 10" in s or "3 / 10" in s for s in after["seen"]), after


def test_a_reconnect_draws_the_rows_newer_counts_from_the_api(live_server, running, admin_user, browser) -> None:  # noqa: F811
    """The socket closes, the rows advance (a report the page never got on it), the socket comes
    back: the re-sync's /api/sweeps/<id>/ progress brings the newer counts. The status block's poll
    is answered 204 (no swap) throughout, so the re-sync is the only way they can arrive."""
    sockets: list = []
    api_calls: list = []
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.route_web_socket(re.compile(r".*/ws/live/.*"), lambda ws: sockets.append(ws))
    page.goto(live_server.url + "/login/")
    page.fill("input[name=username]", admin_user.username)
    page.fill("input[name=password]", "correct-horse-battery")
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
    page.route(re.compile(rf".*/benchmarks/sweeps/{running['sweep_id']}/progress/.*"),
               lambda route: route.fulfill(status=204, body=""))
    page.on("request", lambda r: api_calls.append(r.url) if f"/api/sweeps/{running['sweep_id']}/" in r.url else None)
    page.goto(f"{live_server.url}/benchmarks/sweeps/{running['sweep_id']}/", wait_until="load")
    requests_text = f"() => document.querySelector('{PANEL} [data-f=\"requests\"]').textContent"
    assert "7 / 10" in page.evaluate(requests_text)
    assert sockets, "the page opened no live socket"
    group = f"sweep-{running['sweep_id']}"
    subscribed = json.dumps({"type": "live.subscribed", "groups": {group: {"seq": 0, "latest": {}}}})
    sockets[0].send(subscribed)
    page.wait_for_function("() => document.documentElement.getAttribute('data-live-state') === 'live'",
                           timeout=10_000)

    sockets[0].close()
    page.wait_for_function("() => document.documentElement.getAttribute('data-live-state') === 'reconnecting'",
                           timeout=10_000)
    # While the socket is down the point goes on: its rows now hold a newer report (9 of 10).
    # (Playwright's sync API runs an event loop in this thread: the row is written from another.)
    newer = timezone.now()
    thread = threading.Thread(target=_advance, args=(running, newer))
    thread.start()
    thread.join()
    page.wait_for_timeout(300)   # the first connect's re-sync, if still under way, has landed
    calls_before = len(api_calls)
    deadline = time.monotonic() + 20
    while len(sockets) < 2 and time.monotonic() < deadline:
        page.wait_for_timeout(200)
    assert len(sockets) >= 2, "the page did not reconnect"
    page.wait_for_timeout(300)
    assert "7 / 10" in page.evaluate(requests_text), "no newer counts may show before the re-sync"
    sockets[-1].send(subscribed)
    page.wait_for_function(f"""() => document.querySelector('{PANEL} [data-f="requests"]')
                                        .textContent.includes('9 / 10')""", timeout=10_000)
    assert len(api_calls) > calls_before, api_calls
    shown = page.evaluate(f"""() => {{
      const panel = document.querySelector('{PANEL}'), f = n => panel.querySelector('[data-f="' + n + '"]').textContent;
      return {{failed: f('failed'), age: f('sample-age')}};
    }}""")
    assert shown["failed"].startswith("2"), shown
    assert newer.strftime("%H:%M:%S") in shown["age"], shown


def _advance(running: dict, newer) -> None:
    from django.db import connection

    try:
        BenchmarkRun.objects.filter(pk=running["run_id"]).update(progress={
            "done": 9, "total": 10, "failed": 2, "output_tokens": 72, "elapsed_s": 2.4, "tok_s": 90.0,
            "tok_s_mean": 30.0, "duration_s": None, "total_sent_so_far": False, "updated_at": _iso(newer)})
        BenchmarkSweep.objects.filter(pk=running["sweep_id"]).update(requests_done=9)
    finally:
        connection.close()


@pytest.fixture
def time_limited(admin_user) -> dict:
    """A running sweep whose point is a closed loop limited by time (42 done of the 44 sent so
    far), with the terminal's progress line for it, read before the browser starts."""
    from benchmarks.services.sweeps import sweep_follow_line

    stored = timezone.now() - timedelta(seconds=2)
    sweep = BenchmarkSweep.objects.create(status=SweepStatus.RUNNING, points_total=2, requests_total=0,
                                          grid={"concurrency": [4, 8], "lengths": [[8, 8]], "duration_s": 30.0},
                                          current_point="c=4 8/8", requests_done=42, current_tok_s=80.0,
                                          started_at=stored - timedelta(seconds=15), created_by=admin_user)
    BenchmarkRun.objects.create(
        sweep=sweep, ordinal=0, status=RunStatus.RUNNING, concurrency=4, input_len=8, output_len=8, duration_s=30.0,
        progress={"done": 42, "total": 44, "failed": 0, "output_tokens": 336, "elapsed_s": 12.0, "tok_s": 80.0,
                  "tok_s_mean": 28.0, "duration_s": 30.0, "total_sent_so_far": True, "updated_at": _iso(stored)})
    return {"sweep_id": sweep.pk, "line": sweep_follow_line(sweep=sweep, elapsed_s=17.0)}


def test_a_time_limited_point_reads_as_the_terminal_says_it(live_server, time_limited, admin_user,
                                                            browser) -> None:  # noqa: F811
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.route_web_socket(re.compile(r".*/ws/live/.*"), lambda ws: None)
    page.goto(live_server.url + "/login/")
    page.fill("input[name=username]", admin_user.username)
    page.fill("input[name=password]", "correct-horse-battery")
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
    page.goto(f"{live_server.url}/benchmarks/sweeps/{time_limited['sweep_id']}/", wait_until="load")
    shown = page.evaluate(f"""() => ({{
      requests: document.querySelector('{PANEL} [data-f="requests"]').textContent,
      block: document.querySelector('#sweep-progress .run-progress').textContent}})""")
    assert shown["requests"] == "42 done of 44 sent so far, time-limited", shown
    assert "c=4 8/8: 42 done of 44 sent so far, time-limited (the point sends what fits in its time)" in shown["block"]
    assert "(point 42 done of 44 sent so far, time-limited)" in time_limited["line"], time_limited["line"]
