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
from controlplane.tests.browser.conftest import browser, sign_in  # noqa: F401 - the fixture

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
    sign_in(page, live_server.url, admin_user)
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
    sign_in(page, live_server.url, admin_user)
    page.route(re.compile(rf".*/benchmarks/sweeps/{running['sweep_id']}/progress/.*"),
               lambda route: route.fulfill(status=204, body=""))
    api_path = f"/api/sweeps/{running['sweep_id']}/"
    page.on("request", lambda r: api_calls.append(r.url) if api_path in r.url else None)
    page.goto(f"{live_server.url}/benchmarks/sweeps/{running['sweep_id']}/", wait_until="load")
    requests_text = f"() => document.querySelector('{PANEL} [data-f=\"requests\"]').textContent"
    assert "7 / 10" in page.evaluate(requests_text)
    assert sockets, "the page opened no live socket"
    group = f"sweep-{running['sweep_id']}"
    subscribed = json.dumps({"type": "live.subscribed", "groups": {group: {"seq": 0, "latest": {}}}})
    # The first connect re-syncs too: its /api/sweeps/<id>/ answer must have come back before the
    # rows advance, or it reads them already at 9 and draws that before the socket comes back.
    with page.expect_event("requestfinished", lambda r: r.url.endswith(api_path), timeout=10_000):
        sockets[0].send(subscribed)
    page.wait_for_function("() => document.documentElement.getAttribute('data-live-state') === 'live'",
                           timeout=10_000)
    assert "7 / 10" in page.evaluate(requests_text)

    sockets[0].close()
    page.wait_for_function("() => document.documentElement.getAttribute('data-live-state') === 'reconnecting'",
                           timeout=10_000)
    calls_before = len(api_calls)
    # While the socket is down the point goes on: its rows now hold a newer report (9 of 10).
    # (Playwright's sync API runs an event loop in this thread: the row is written from another.)
    newer = timezone.now()
    thread = threading.Thread(target=_advance, args=(running, newer))
    thread.start()
    thread.join()
    # The back-off's first retry comes after 0.5 s (jittered, at most 0.625 s); 20 s is ample.
    deadline = time.monotonic() + 20
    while len(sockets) < 2 and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert len(sockets) >= 2, "the page did not reconnect within 20 s"
    # Nothing re-syncs before the server says subscribed, so the rows' 9 cannot be shown yet.
    assert len(api_calls) == calls_before, api_calls
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


# Every frame's visible text of the status block and the live panel (innerText leaves out what is
# hidden), kept when it changes: what the page showed, not only where it ended.
_SAMPLER = """() => {
  window.frames_ = [];
  const text = sel => { const el = document.querySelector(sel); return el ? el.innerText : ''; };
  const tick = () => {
    const now = {status: text('#sweep-progress'), live: text('#sweep-live'),
                 bar: (document.querySelector('#sweep-progress [data-sweep-bar] .progress-bar') || {style: {}}).style.width};
    const last = window.frames_[window.frames_.length - 1];
    if (!last || last.status !== now.status || last.live !== now.live || last.bar !== now.bar) window.frames_.push(now);
    requestAnimationFrame(tick);
  };
  tick();
}"""


def _open_sweep_page(live_server, admin_user, browser, sweep_id: int):  # noqa: F811
    sockets: list = []
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.route_web_socket(re.compile(r".*/ws/live/.*"), lambda ws: sockets.append(ws))
    sign_in(page, live_server.url, admin_user)
    page.goto(f"{live_server.url}/benchmarks/sweeps/{sweep_id}/", wait_until="load")
    assert sockets, "the page opened no live socket"
    sockets[0].send(json.dumps({"type": "live.subscribed", "groups": {f"sweep-{sweep_id}": {"seq": 0, "latest": {}}}}))
    return page, sockets[0]


def test_a_newer_report_shows_the_same_counts_everywhere_and_older_rows_never_come_back(
        live_server, running, admin_user, browser) -> None:  # noqa: F811
    """The rows hold 7 of 10 (7 of the sweep's 20); a socket report made after them says 9 of 10
    (9 of 20) at 90.0 tok/s over the window and 30.0 mean. The page's visible text then has each
    count once, the same everywhere: the point's figures only in the live panel (the status
    block's copies of them are hidden while it shows), the sweep's 9 / 20 and its bar in the
    status block; and the status block's refreshes, whose rows stay at 7, never show 7 again."""
    page, ws = _open_sweep_page(live_server, admin_user, browser, running["sweep_id"])
    at_load = page.evaluate("() => ({status: document.querySelector('#sweep-progress').innerText,"
                            " live: document.querySelector('#sweep-live').innerText})")
    # At load the live panel holds the point's figures and the status block shows none of them.
    assert "7 / 10" in at_load["live"] and "80.0 tok/s" in at_load["live"], at_load
    assert "7 / 20 requests" in at_load["status"], at_load
    for hidden in ("Running point", "Current output", "7 / 10", "tok/s"):
        assert hidden not in at_load["status"], (hidden, at_load)
    assert "open its run" in at_load["live"]
    assert page.get_attribute(f'{PANEL} [data-f="run-link"]', "href") == f"/benchmarks/runs/{running['run_id']}/"

    page.evaluate(_SAMPLER)
    newer = json.loads(_report(running, done=9, updated_at=running["stored"] + timedelta(seconds=1), seq=1))
    newer["data"].update(tok_s=90.0, tok_s_mean=30.0)
    ws.send(json.dumps(newer))
    page.wait_for_function("""() => document.querySelector('#sweep-progress').innerText.includes('9 / 20 requests')
                                    && document.querySelector('#sweep-live').innerText.includes('9 / 10')""",
                           timeout=10_000)
    # Two or more refreshes of the status block, each from rows still at 7 of 10.
    polls: list = []
    page.on("response", lambda r: polls.append(r.status) if "/progress/" in r.url else None)
    page.wait_for_timeout(2600)
    assert len(polls) >= 2 and all(s == 200 for s in polls), polls

    frames = page.evaluate("() => window.frames_")
    first_new = next(i for i, f in enumerate(frames) if "9 / 10" in f["live"])
    for f in frames[first_new:]:
        assert "7 / 20" not in f["status"] and "7 / 10" not in f["status"] + f["live"], f
        assert "80.0" not in f["status"] + f["live"] and "40.0" not in f["status"] + f["live"], f
    last = frames[-1]
    assert "9 / 20 requests" in last["status"] and float(last["bar"].rstrip("%")) == 45.0, last
    body = page.evaluate("() => document.body.innerText")
    assert body.count("9 / 10") == 1 and body.count("90.0 tok/s") == 1 and body.count("30.0 tok/s") == 1, body
    # Each tok/s figure shown names its window.
    live = page.evaluate(f"""() => Array.from(document.querySelectorAll('{PANEL} dt'))
                                   .map(dt => dt.innerText + ': ' + dt.nextElementSibling.innerText)""")
    assert "Output tok/s, last 0.5 s window: 90.0 tok/s" in live, live
    assert "Output tok/s, mean since start: 30.0 tok/s" in live, live


@pytest.fixture
def preparing(admin_user) -> dict:
    """A running one-point sweep whose rows still hold the point's prompt preparation (20 of 20),
    made before the browser starts."""
    stored = timezone.now() - timedelta(seconds=2)
    sweep = BenchmarkSweep.objects.create(status=SweepStatus.RUNNING, points_total=1, requests_total=4,
                                          grid={"concurrency": [2], "lengths": [[8, 8]], "requests": 4},
                                          current_point="c=2 8/8", requests_done=1, current_tok_s=None,
                                          started_at=stored - timedelta(seconds=5), created_by=admin_user)
    run = BenchmarkRun.objects.create(
        sweep=sweep, ordinal=0, status=RunStatus.RUNNING, concurrency=2, input_len=8, output_len=8, num_requests=4,
        progress={"phase": "preparing prompts", "prepared": 20, "total": 20, "updated_at": _iso(stored)})
    return {"sweep_id": sweep.pk, "run_id": run.pk, "stored": stored}


def test_rows_still_preparing_prompts_never_show_beside_a_newer_report_of_requests(
        live_server, preparing, admin_user, browser) -> None:  # noqa: F811
    """The rows say "preparing prompts"; the socket already reports 2 of 4 requests at 15.9 tok/s
    after 1.2 s. No frame after that shows the phase or 1 of 4 anywhere, through the status
    block's refreshes from those rows."""
    page, ws = _open_sweep_page(live_server, admin_user, browser, preparing["sweep_id"])
    assert "preparing prompts: 20 / 20" in page.inner_text(PANEL)
    assert "preparing prompts" not in page.inner_text("#sweep-progress")
    page.evaluate(_SAMPLER)
    data = {"sweep_id": preparing["sweep_id"], "run_id": preparing["run_id"], "point_index": 0, "points_total": 1,
            "done": 2, "total": 4, "failed": 0, "output_tokens": 16, "elapsed_s": 1.2, "tok_s": 15.9,
            "tok_s_mean": 13.3, "point": "c=2 8/8", "duration_s": None, "total_sent_so_far": False,
            "requests_done": 2, "updated_at": _iso(preparing["stored"] + timedelta(seconds=1))}
    ws.send(json.dumps({"type": "sweep.progress", "seq": 1, "group": f"sweep-{preparing['sweep_id']}",
                        "ts": time.time(), "data": data}))
    page.wait_for_function("() => document.querySelector('#sweep-progress').innerText.includes('2 / 4 requests')",
                           timeout=10_000)
    page.wait_for_timeout(2600)   # refreshes of the status block from the rows
    frames = page.evaluate("() => window.frames_")
    first_new = next(i for i, f in enumerate(frames) if "2 / 4" in f["live"])
    for f in frames[first_new:]:
        assert "preparing prompts" not in f["status"] + f["live"] and "1 / 4" not in f["status"] + f["live"], f
    body = page.evaluate("() => document.body.innerText")
    assert body.count("15.9 tok/s") == 1 and body.count("1.2 s") == 1, body
    assert "2 / 4 requests" in frames[-1]["status"] and float(frames[-1]["bar"].rstrip("%")) == 50.0, frames[-1]


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
    sign_in(page, live_server.url, admin_user)
    page.goto(f"{live_server.url}/benchmarks/sweeps/{time_limited['sweep_id']}/", wait_until="load")
    shown = page.evaluate(f"""() => ({{
      requests: document.querySelector('{PANEL} [data-f="requests"]').textContent,
      block: document.querySelector('#sweep-progress .run-progress').textContent}})""")
    assert shown["requests"] == "42 done of 44 sent so far, time-limited", shown
    assert "c=4 8/8: 42 done of 44 sent so far, time-limited (the point sends what fits in its time)" in shown["block"]
    assert "(point 42 done of 44 sent so far, time-limited)" in time_limited["line"], time_limited["line"]


@pytest.fixture
def stopping(running) -> dict:
    """The running point's last report after a stop: 7 finished (1 failed) and 2 aborted in flight."""
    from benchmarks.services.sweeps import sweep_follow_line

    run = BenchmarkRun.objects.get(pk=running["run_id"])
    run.progress = {**run.progress, "aborted": 2}
    run.save(update_fields=["progress"])
    return {**running, "line": sweep_follow_line(sweep=run.sweep, elapsed_s=7.0)}


def test_requests_a_stop_aborted_show_apart_from_the_failed_ones_and_only_when_there_are_some(
        live_server, stopping, admin_user, browser) -> None:  # noqa: F811
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    sockets: list = []
    page.route_web_socket(re.compile(r".*/ws/live/.*"), lambda ws: sockets.append(ws))
    sign_in(page, live_server.url, admin_user)
    page.goto(f"{live_server.url}/benchmarks/sweeps/{stopping['sweep_id']}/", wait_until="load")
    read = f"""() => {{
      const panel = document.querySelector('{PANEL}'), el = n => panel.querySelector('[data-f="' + n + '"]');
      return {{requests: el('requests').textContent, failed: el('failed').textContent,
              aborted: el('aborted').textContent, hidden: el('aborted').hidden || el('aborted-label').hidden,
              block: document.querySelector('#sweep-progress .run-progress').textContent}};
    }}"""
    shown = page.evaluate(read)
    assert "7 / 10" in shown["requests"] and shown["failed"] == "1 failed", shown
    assert not shown["hidden"] and shown["aborted"] == "2 aborted", shown
    assert "7 / 10 requests done, 1 failed, 2 aborted in flight" in " ".join(shown["block"].split()), shown
    assert "(point 7/10, 1 failed, 2 aborted in flight)" in stopping["line"], stopping["line"]
    # A report without any aborted request hides the field again.
    assert sockets, "the page opened no live socket"
    sockets[0].send(_report(stopping, done=8, updated_at=timezone.now(), seq=1))
    page.wait_for_function(f"""() => document.querySelector('{PANEL} [data-f="requests"]')
                                      .textContent.includes('8 / 10')""")
    assert page.evaluate(read)["hidden"]
