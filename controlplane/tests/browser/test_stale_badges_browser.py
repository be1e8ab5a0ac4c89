"""Every live badge reads as last seen while its page is stale, and the page is live again soon
after its server returns, in a real browser (the Debian ``chromium`` package driven by Playwright)
against Django's live test server. The page's ``/ws/live/`` is routed to the test, which speaks
for the server; "the server is down" is every HTTP request of the page refused and every socket
closed as it opens.

While down, each badge a poll or the socket keeps up to date (the deployment's status, its agent's
and its sampled status; the node's agent; the sweep's status in its status block and in its live
panel) says "... (as last seen hh:mm:ss UTC)" and the live line "reconnecting… stale since"; the
socket retries with a growing back-off. Once the server is back, the page's first answered request
(a poll, the node's heartbeat read) has the socket retried at once: every mark goes within
seconds, long before the back-off's next try (at least 11 s after the fifth refused one).
"""
from __future__ import annotations

import json
import re
import time
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from controlplane.tests.browser.conftest import sign_in
from deployments.models import Deployment, Node
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]

SOCKET = re.compile(r".*/ws/live/.*")
LAST_SEEN = r" \(as last seen \d\d:\d\d:\d\d UTC\)$"
#: Refused sockets before the server comes back: the back-off's next try is then 15 s +- 25 % away.
REFUSALS = 5
#: How long the page may take to be live again once the server is back (a poll, a read, the
#: re-sync), generous for a busy machine and still short of the back-off's next try.
BACK_WITHIN_S = 9

STALE_JS = """re => {
  const badges = [...document.querySelectorAll('[data-stale-label]')];
  const lines = [...document.querySelectorAll('[data-live-status]')];
  return badges.length > 0 && badges.every(b => new RegExp(re).test(b.textContent))
    && lines.every(l => l.textContent.startsWith('reconnecting… stale since '));
}"""

CLEAR_JS = """() => {
  const badges = [...document.querySelectorAll('[data-stale-label]')];
  const lines = [...document.querySelectorAll('[data-live-status]')];
  return badges.every(b => !b.hasAttribute('data-live-text') && !b.textContent.includes('as last seen'))
    && lines.every(l => l.textContent === 'updates connected')
    && document.querySelector('[data-stale-since]') === null;
}"""


class Server:
    """The page's server as its socket and requests see it: up (a socket is answered with the
    subscription and ``latest`` messages, pings with pongs) or down (requests refused, sockets
    closed at once, each refusal's time noted)."""

    def __init__(self, page, latest=None):
        self.page = page
        self.latest = latest or (lambda group: {})
        self.down = False
        self.socket = None
        self.refused: list[float] = []
        page.route_web_socket(SOCKET, self._socket)

    def _socket(self, ws) -> None:
        if self.down:
            self.refused.append(time.monotonic())
            ws.close(code=1012, reason="restarting")
            return
        groups = parse_qs(urlsplit(ws.url).query).get("sub", [])

        def answer(text) -> None:
            if json.loads(text).get("action") == "ping":
                ws.send(json.dumps({"type": "live.pong", "t": time.time()}))

        ws.on_message(answer)
        ws.send(json.dumps({"type": "live.subscribed", "ack_every": 50,
                            "groups": {g: {"seq": 1, "latest": self.latest(g)} for g in groups}}))
        self.socket = ws

    @staticmethod
    def _refuse(route) -> None:
        route.abort("connectionrefused")

    def stop(self) -> None:
        self.down = True
        self.page.route("**/*", self._refuse)
        if self.socket is not None:
            self.socket.close(code=1012, reason="restarting")
            self.socket = None

    def start(self) -> None:
        self.down = False
        self.page.unroute("**/*", self._refuse)


def _open(browser, base: str, user, path: str, latest=None):
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    server = Server(page, latest)
    sign_in(page, base, user)
    page.goto(base + path, wait_until="domcontentloaded")
    page.wait_for_function("() => document.documentElement.getAttribute('data-live-state') === 'live'",
                           timeout=20_000)
    page.wait_for_function(CLEAR_JS, timeout=20_000)
    return page, server, errors


def _stale_then_back(page, server: Server, badges: dict[str, str]) -> None:
    """Take the server down: every live badge, ``badges`` (selector -> its live text) among them,
    reads as last seen; after REFUSALS refused sockets, bring it back: all clear within
    BACK_WITHIN_S."""
    for selector, text in badges.items():
        assert page.locator(selector).inner_text() == text, (selector, page.locator(selector).inner_text())
    server.stop()
    page.wait_for_function(STALE_JS, arg=LAST_SEEN, timeout=20_000)
    for selector, text in badges.items():
        shown = page.locator(selector).inner_text()
        assert re.fullmatch(re.escape(text) + LAST_SEEN, shown), (selector, shown)

    # Down for a while: the socket backs off (no socket a poll's cadence), the marks stay.
    deadline = time.monotonic() + 60
    while len(server.refused) < REFUSALS and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert len(server.refused) >= REFUSALS, server.refused
    gaps = [b - a for a, b in zip(server.refused, server.refused[1:])]
    assert gaps[-1] > 4, gaps  # the fifth waited out a back-off of 8 s +- 25 %
    assert page.evaluate(STALE_JS, LAST_SEEN)

    server.start()
    back = time.monotonic()
    page.wait_for_function(CLEAR_JS, timeout=BACK_WITHIN_S * 1000, polling=200)
    assert time.monotonic() - back < BACK_WITHIN_S
    for selector, text in badges.items():
        assert page.locator(selector).inner_text() == text, (selector, page.locator(selector).inner_text())


@pytest.fixture
def ready_deployment(transactional_db) -> int:
    """A ready deployment on a node whose agent heartbeated just now; its id."""
    node = cpu_node_create(name="edge-box")
    Node.objects.filter(pk=node.pk).update(agent_heartbeat_at=timezone.now())
    node.refresh_from_db()
    pk = deployment_row_create(recipe=recipe_row_create(node=node, name="edge-single")).pk
    Deployment.objects.filter(pk=pk).update(ready_at=timezone.now())
    return pk


def test_every_badge_of_the_deployment_page_reads_as_last_seen_while_its_server_is_down(
        live_server, ready_deployment, viewer, browser):
    def latest(group: str) -> dict:
        now = time.time()
        sample = {"t": now, "interval_s": 0.5, "status": "ready", "tok_s": 12.5, "processes": []}
        return {"deployment.sample": {"type": "deployment.sample", "seq": 1, "group": group, "ts": now, "data": sample}}

    page, server, errors = _open(browser, live_server.url, viewer, f"/deployments/{ready_deployment}/", latest)
    _stale_then_back(page, server, {
        '#deployment-telemetry [data-f="status"]': "ready",   # Sampled status
        "#deployment-live .status-line .tag": "ready",
        "#deployment-live .facts .tag": "agent online",
    })
    assert errors == [], errors
    page.context.close()


@pytest.fixture
def online_node(transactional_db, settings) -> str:
    """A node whose agent heartbeated just now, read by its page every second and online for
    10 min; its name."""
    settings.CEILING_AGENT_HEARTBEAT_S = 1.0
    settings.CEILING_HEARTBEAT_TIMEOUT_S = 600.0
    node = cpu_node_create(name="edge-box")
    Node.objects.filter(pk=node.pk).update(agent_heartbeat_at=timezone.now(), agent_pid=4321)
    return node.name


def test_the_node_pages_agent_badge_reads_as_last_seen_while_its_server_is_down(
        live_server, online_node, viewer, browser):
    page, server, errors = _open(browser, live_server.url, viewer, f"/nodes/{online_node}/")
    _stale_then_back(page, server, {"[data-agent-badge]": "agent online"})
    assert errors == [], errors
    page.context.close()


def _iso(t) -> str:
    return t.isoformat().replace("+00:00", "Z")


@pytest.fixture
def running_sweep(transactional_db, admin_user) -> int:
    """A running sweep whose first point's rows hold a report; its id."""
    stored = timezone.now() - timedelta(seconds=2)
    sweep = BenchmarkSweep.objects.create(status=SweepStatus.RUNNING, points_total=2, requests_total=20,
                                          grid={"concurrency": [2, 4], "lengths": [[8, 8]], "requests": 10},
                                          current_point="c=2 8/8", requests_done=7, current_tok_s=80.0,
                                          started_at=stored - timedelta(seconds=5), created_by=admin_user)
    BenchmarkRun.objects.create(
        sweep=sweep, ordinal=0, status=RunStatus.RUNNING, concurrency=2, input_len=8, output_len=8,
        num_requests=10, progress={"done": 7, "total": 10, "failed": 1, "output_tokens": 56, "elapsed_s": 1.4,
                                   "tok_s": 80.0, "tok_s_mean": 40.0, "duration_s": None,
                                   "total_sent_so_far": False, "updated_at": _iso(stored)})
    return sweep.pk


def test_both_status_badges_of_the_sweep_page_read_as_last_seen_while_its_server_is_down(
        live_server, running_sweep, admin_user, browser):
    page, server, errors = _open(browser, live_server.url, admin_user, f"/benchmarks/sweeps/{running_sweep}/")
    _stale_then_back(page, server, {
        "#sweep-progress .status-line .tag": "running",
        '#sweep-live [data-f="status"]': "running",
    })
    assert errors == [], errors
    page.context.close()
